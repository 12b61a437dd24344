"""Several daemons on one state database, each a replica that can take over the others' work.

What one replica does (``ha.enabled``; a single daemon has none of this and polls nothing):

* heartbeats its row in ``ha_replicas`` every ``lease/3``; a row whose time ran out is a
  dead replica: whoever notices first buries it, and its conversation claims become free;
  one buried while alive (late, under load) lets every claim go before it claims again
  (decision 0134);
* runs each channel listener (not the console, which is per process) only while it holds
  that channel's lease (``core/replicas/lease_keeper.py``); on taking one it first takes up the
  messages the previous holder stored but had not routed;
* runs the service's shared sweep (approval cards, parked replies) only under the "sweep"
  lease;
* runs a conversation's tasks only while it claims the conversation (of a channel that
  ``SendsWhereItListens``, only while it holds that channel's listener), claiming free ones
  while it has room (``execution.max_concurrent_tasks`` conversations): ``claims.py``;
* fires the scheduled runs of the channels whose listener it holds (the run's intake and
  notices belong with the listener; a run is claimed once in the database anyway);
* lets a task waiting for an action approval see a decision another replica recorded (the
  press reaches the listener's replica): ``ActionApprovals.watch_shared``;
* stores a reply only while its claim's token is still the one its run started with
  (``claims.py``), so a replica that was declared dead and wakes up cannot answer a task the
  others already took over.

Intake stays where the listener is: the listener's replica authenticates, routes and
acknowledges; the task may then run on any replica. ``/stop`` stops a task only on the
replica that runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterable, Mapping

from gateway_bot.config.ha import HaSettings
from gateway_bot.core.channel import ChannelAdapter, SendsWhereItListens
from gateway_bot.core.replicas.claims import Claims
from gateway_bot.core.replicas.lease_keeper import LeaseKeeper
from gateway_bot.core.service import GatewayService
from gateway_bot.state.leases_store import LeaseStore

log = logging.getLogger(__name__)

SWEEP_LEASE = "sweep"


def listener_lease_name(channel: str) -> str:
    return f"listener:{channel}"


def new_replica_id() -> str:
    """Host, process and a random part: unique across hosts and restarts."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"


class Replicas:
    """This replica's part in the group; also the service's ``ReplicaDuties``, and its
    ``claims`` the scheduler's ``ConversationClaims`` (set on them here, so before the
    service starts)."""

    def __init__(
        self,
        leases: LeaseStore,
        service: GatewayService,
        adapters: Mapping[str, ChannelAdapter],
        leased_channels: Iterable[str],
        settings: HaSettings,
        max_conversations: int,
        *,
        replica_id: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.id = replica_id or new_replica_id()
        self._leases = leases
        self._service = service
        self._scheduler = service.scheduler
        self._lease_s = settings.lease_seconds
        self._poll_s = settings.poll_seconds
        self._max_conversations = max_conversations
        self._clock = clock
        self._wake = asyncio.Event()
        self.claims = Claims(leases, service, self.id, self._wake, clock)
        self._joined = 0
        """Goes up each time it joined again: a heartbeat sent before that, answered after,
        says nothing of the row it has now."""
        self._loops: list[asyncio.Task[None]] = []
        self._leased = frozenset(leased_channels)
        self._bound = sorted(
            name for name, a in adapters.items() if isinstance(a, SendsWhereItListens)
        )
        """Channels whose tasks run only where their listener runs."""
        self._keepers: dict[str, LeaseKeeper] = {}
        for channel in sorted(self._leased):
            self._keepers[channel] = self._listener_keeper(channel, adapters[channel])
        service.replicas = self
        self._scheduler.claims = self.claims
        if service.action_approvals is not None:
            # A card's press is heard by the listener's replica; the task may wait here.
            service.action_approvals.watch_shared(self._poll_s)
        if service.schedules is not None:
            service.schedules.fires_here = self.leads
        self._keepers[SWEEP_LEASE] = LeaseKeeper(
            SWEEP_LEASE,
            leases,
            self.id,
            self._lease_s,
            start=self._start_sweeping,
            stop=_nothing,
            clock=clock,
        )

    def _listener_keeper(self, channel: str, adapter: ChannelAdapter) -> LeaseKeeper:
        async def start() -> None:
            await self._service.take_in_channel(channel)
            await adapter.listener.start(self._service.submit)
            if self._service.schedules is not None:
                self._service.schedules.wake()  # its runs fire here now

        return LeaseKeeper(
            listener_lease_name(channel),
            self._leases,
            self.id,
            self._lease_s,
            start=start,
            stop=adapter.listener.stop,
            clock=self._clock,
        )

    async def _start_sweeping(self) -> None:
        self._service.spawn(self._service.sweep(), name="sweep-on-lease")

    # -- ReplicaDuties -------------------------------------------------------------------

    def leases_listener(self, channel: str) -> bool:
        return channel in self._leased

    def leads(self, duty: str) -> bool:
        keeper = self._keepers.get(duty)
        return keeper.held if keeper is not None else duty not in self._leased

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Join the group (after the service started: it must accept messages before a
        listener lease starts a listener)."""
        await self._leases.register(
            self.id, socket.gethostname(), os.getpid(), self._clock(), self._lease_s
        )
        log.info("replica %s joined (lease %.1f s)", self.id, self._lease_s)
        for keeper in self._keepers.values():
            keeper.start()
        self._loops = [
            asyncio.create_task(self._heartbeat(), name="replica-heartbeat"),
            asyncio.create_task(self._dispatch(), name="replica-dispatch"),
        ]

    async def stop_listening(self) -> None:
        """Stop the leased listeners and hand their leases back (before the service's own
        shutdown, which leaves running tasks where they stand)."""
        for loop in self._loops:
            loop.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        self._loops = []
        for keeper in self._keepers.values():
            await keeper.close()

    async def leave(self) -> None:
        """After the service's shutdown: this replica's claims free at once, its row gone,
        so the others take over what it left without waiting for its heartbeat to expire."""
        self.claims.let_go(abandon=False)
        try:
            await self._leases.leave(self.id)
        except Exception as exc:
            log.warning("replica %s: could not leave cleanly (%r)", self.id, exc)

    # -- loops -----------------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self._lease_s / 3)
            if self.claims.buried:
                continue  # joining again, which writes the row anew
            joined = self._joined
            try:
                alive = await self._leases.heartbeat(self.id, self._clock(), self._lease_s)
            except Exception as exc:
                log.warning("replica %s: heartbeat failed (%r)", self.id, exc)
                continue
            if not alive and not self.claims.buried and joined == self._joined:
                self.claims.buried = True
                self._wake.set()  # the dispatch loop lets go of the claims, then rejoins

    async def _dispatch(self) -> None:
        while True:
            try:
                await self._dispatch_once()
            except Exception:
                log.exception("replica %s: looking for work failed; trying again", self.id)
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns the inner
            # result when the wake and a cancellation come together, and the loop then
            # waited on for ever with the cancellation lost (stop_listening hung).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll_s):
                    await self._wake.wait()
            self._wake.clear()

    async def _dispatch_once(self) -> None:
        now = self._clock()
        replicas = await self._leases.replicas()
        if self.claims.buried or all(replica.id != self.id for replica in replicas):
            await self._rejoin()
            return
        for replica in replicas:
            dead = replica.id != self.id and replica.expires_at < now
            if dead and await self._leases.bury(replica.id, now):
                log.warning(
                    "replica %s missed its heartbeat (%.1f s ago): taking over its work",
                    replica.id,
                    now - replica.heartbeat_at,
                )
        await self.claims.queue_pending()
        self.claims.hand_back_idle()
        room = self._max_conversations - self.claims.count
        if room > 0:
            elsewhere = [channel for channel in self._bound if not self.leads(channel)]
            await self.claims.claim_free(room, elsewhere)

    async def _rejoin(self) -> None:
        """Declared dead while alive: every claim is let go here (the lanes' queued tasks
        leave them, their runs stop unanswered) and in the database, where a claim this
        replica took back before it knew would otherwise be nobody's for ever; then it
        joins again, and claims what it has room for, in order, like any replica."""
        log.error(
            "replica %s was declared dead by another replica (no heartbeat in time); its "
            "conversations were taken over; letting its claims go and joining again",
            self.id,
        )
        self.claims.buried = True
        self.claims.let_go(abandon=True)
        await self._leases.rejoin(
            self.id, socket.gethostname(), os.getpid(), self._clock(), self._lease_s
        )
        self._joined += 1
        self.claims.buried = False
        self._wake.set()


async def _nothing() -> None:
    return None
