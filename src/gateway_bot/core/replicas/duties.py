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
  ``SendsWhereItListens``, only while it holds that channel's listener): it claims free
  conversations with unfinished tasks while it has room (``execution.max_concurrent_tasks``
  conversations), recovers what a dead holder left (a stored reply delivered, an
  interrupted run re-run), queues their pending tasks oldest first, and releases the claim
  once its queue there is empty (when that write fails, it keeps the claim and tries again
  while the conversation is idle: forgetting it would leave it to nobody). One claim per
  conversation keeps its tasks in order whichever replica runs them, and never two at once;
* fires the scheduled runs of the channels whose listener it holds (the run's intake and
  notices belong with the listener; a run is claimed once in the database anyway);
* lets a task waiting for an action approval see a decision another replica recorded (the
  press reaches the listener's replica): ``ActionApprovals.watch_shared``;
* stores a reply only while its claim's token is still its own (``record_reply``: the
  check and the write are one transaction), so a replica that was declared dead and wakes up
  cannot answer a task the others already took over.

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
from gateway_bot.core.replicas.lease_keeper import LeaseKeeper
from gateway_bot.core.service import GatewayService
from gateway_bot.domain.messages import Reply
from gateway_bot.state.leases_store import LeaseStore

log = logging.getLogger(__name__)

SWEEP_LEASE = "sweep"
SETTLE_S = 30.0
"""How long taking up a conversation waits for the run this replica stopped there."""


def listener_lease_name(channel: str) -> str:
    return f"listener:{channel}"


def new_replica_id() -> str:
    """Host, process and a random part: unique across hosts and restarts."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"


class Replicas:
    """This replica's part in the group; also the scheduler's ``ConversationClaims`` and
    the service's ``ReplicaDuties`` (set on them here, so before the service starts)."""

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
        self._held: dict[str, int] = {}
        """Conversation id -> the token of this replica's claim on it."""
        self._taking_up: set[str] = set()
        """Claimed conversations whose previous holder's leftovers are being finished: none
        of their tasks is queued here before that is done (their order)."""
        self._hand_back_failed: set[str] = set()
        """Held conversations whose hand-back (the unclaim's write) failed: the database
        still names this replica their holder, so it keeps them (its pending tasks are
        queued here) and the dispatch loop hands them back again while their lane is empty.
        Forgetting them instead would strand them: nobody else may claim them."""
        self._era = 0
        """Goes up whenever this replica forgets all its claims (it left, or was declared
        dead): a hand-back that fails after that keeps nothing."""
        self._buried = False
        """Declared dead by another replica while alive (a heartbeat late, under load):
        until the dispatch loop has let go of every claim, it holds none."""
        self._joined = 0
        """Goes up each time it joined again: a heartbeat sent before that, answered after,
        says nothing of the row it has now."""
        self._wake = asyncio.Event()
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
        self._scheduler.claims = self
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

    # -- ConversationClaims ----------------------------------------------------------------

    def holds(self, conversation_id: str) -> bool:
        return (
            conversation_id in self._held
            and conversation_id not in self._taking_up
            and not self._buried
        )

    def claim_token(self, conversation_id: str) -> int | None:
        return self._held.get(conversation_id) if self.holds(conversation_id) else None

    def wanted(self, conversation_id: str) -> None:
        self._wake.set()

    def drained(self, conversation_id: str) -> None:
        if conversation_id in self._taking_up:
            return  # a lane abandoned before its claim was taken again: ``_take_up`` decides
        self._hand_back_failed.discard(conversation_id)
        token = self._held.pop(conversation_id, None)
        if token is None:
            return
        self._service.spawn(
            self._unclaim(conversation_id, token, self._era), name=f"unclaim-{conversation_id}"
        )

    async def record_reply(
        self, conversation_id: str, task_id: str, reply: Reply, token: int
    ) -> bool:
        if self._held.get(conversation_id) != token or self._buried:
            return False
        return await self._leases.record_reply_fenced(
            task_id, reply, conversation_id, self.id, token
        )

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
        self._held.clear()
        self._hand_back_failed.clear()
        self._era += 1
        try:
            await self._leases.leave(self.id)
        except Exception as exc:
            log.warning("replica %s: could not leave cleanly (%r)", self.id, exc)

    # -- loops -----------------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self._lease_s / 3)
            if self._buried:
                continue  # joining again, which writes the row anew
            joined = self._joined
            try:
                alive = await self._leases.heartbeat(self.id, self._clock(), self._lease_s)
            except Exception as exc:
                log.warning("replica %s: heartbeat failed (%r)", self.id, exc)
                continue
            if not alive and not self._buried and joined == self._joined:
                self._buried = True
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
        if self._buried or all(replica.id != self.id for replica in replicas):
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
        await self._queue_pending()
        self._hand_back_idle()
        room = self._max_conversations - len(self._held)
        if room <= 0:
            return
        elsewhere = [channel for channel in self._bound if not self.leads(channel)]
        for conversation_id in await self._leases.claimable(room, elsewhere):
            if self._buried:
                return  # the next round lets go first
            if conversation_id in self._taking_up:
                continue  # the take-up of a claim let go at a rejoin is still ending
            token = await self._leases.claim(conversation_id, self.id, self._clock())
            if token is None:
                continue  # another replica was quicker
            self._held[conversation_id] = token
            self._hand_back_failed.discard(conversation_id)
            self._taking_up.add(conversation_id)
            self._service.spawn(
                self._take_up(conversation_id, token), name=f"take-up-{conversation_id}"
            )

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
        self._buried = True
        for conversation_id in self._held:
            self._scheduler.abandon(conversation_id)
        self._held.clear()
        self._hand_back_failed.clear()
        self._era += 1
        await self._leases.rejoin(
            self.id, socket.gethostname(), os.getpid(), self._clock(), self._lease_s
        )
        self._joined += 1
        self._buried = False
        self._wake.set()

    async def _queue_pending(self, only: str | None = None) -> None:
        """Queue, oldest first, the pending tasks of the conversations this replica holds
        that are not queued here yet: routed by another replica's intake, or left by the
        previous holder. ``only``: the conversation being taken up, which is held from the
        moment the store has answered (no await between), so a message its intake queues
        meanwhile cannot go ahead of the older ones read here."""
        pending = await self._leases.pending_of(self.id)
        if only is not None:
            self._taking_up.discard(only)
        for conversation_id, task_id in pending:
            if only is not None and conversation_id != only:
                continue
            if self.holds(conversation_id) and not self._scheduler.in_lane(
                conversation_id, task_id
            ):
                self._scheduler.enqueue(conversation_id, task_id)

    async def _take_up(self, conversation_id: str, token: int) -> None:
        """Finish what the previous holder left, then queue the pending tasks. Each step
        first asks whether the claim is still this one (a rejoin lets it go meanwhile):
        a take-up of a claim let go acts on nothing and hands back nothing."""

        def ours() -> bool:
            return self._held.get(conversation_id) == token and not self._buried

        try:
            # A lane this replica abandoned (declared dead) ends its stopped run first: the
            # recovery below must not find that run's task executing and queue it again
            # behind tasks still in the lane.
            while not await self._scheduler.settled(conversation_id, SETTLE_S) and ours():
                log.warning(
                    "conversation %s: the run this replica stopped has not ended after "
                    "%.0f s; still waiting before taking it up",
                    conversation_id,
                    SETTLE_S,
                )
            if ours() and self._service.action_approvals is not None:
                await self._service.action_approvals.abandon_in(conversation_id)
            if ours():
                await self._service.recover_conversation(conversation_id)
            if ours():
                await self._queue_pending(conversation_id)
        finally:
            self._taking_up.discard(conversation_id)
            if ours() and self._scheduler.depth(conversation_id) == 0:
                self.drained(conversation_id)

    def _hand_back_idle(self) -> None:
        """Try again to hand back the conversations whose hand-back failed, once nothing of
        theirs is queued or running here (a task queued meanwhile hands it back when done)."""
        for conversation_id in sorted(self._hand_back_failed):
            if conversation_id not in self._held:
                self._hand_back_failed.discard(conversation_id)
            elif (
                conversation_id not in self._taking_up
                and self._scheduler.depth(conversation_id) == 0
            ):
                self.drained(conversation_id)

    async def _unclaim(self, conversation_id: str, token: int, era: int) -> None:
        try:
            await self._leases.unclaim(conversation_id, self.id, token)
        except Exception as exc:
            # The database may still name this replica the holder: keep the claim (its
            # pending tasks run here) and hand it back on a later dispatch round. Unless it
            # was claimed again meanwhile (the write did commit: that token is the live one)
            # or this replica forgot its claims meanwhile (declared dead: it holds none).
            if conversation_id not in self._held and era == self._era:
                self._held[conversation_id] = token
                self._hand_back_failed.add(conversation_id)
            log.warning(
                "replica %s: could not hand conversation %s back (%r); keeping it, trying "
                "again when it is idle",
                self.id,
                conversation_id,
                exc,
            )
            return
        self._wake.set()  # it may have work again already (another replica's intake)


async def _nothing() -> None:
    return None
