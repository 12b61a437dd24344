"""Which conversations this replica runs: its claims on them in the shared database, each
with the fencing token the claim got (the scheduler's ``ConversationClaims``).

A replica claims free conversations with unfinished tasks while it has room, takes each up
(finishes what a dead holder left: a stored reply delivered, an interrupted run re-run;
then queues its pending tasks oldest first), and hands the claim back once its queue there
is empty. When that hand-back's write fails, it keeps the claim and tries again while the
conversation is idle: forgetting it would leave it to nobody. One claim per conversation
keeps its tasks in order whichever replica runs them, and never two at once. A reply is
stored only under the token its run started with (``record_reply``: the check and the write
are one transaction). A replica declared dead while alive lets every claim go before it
claims again (``let_go``, decision 0134). The group's side (heartbeats, burials, the
dispatch loop) is ``duties.py``'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from gateway_bot.core.service import GatewayService
from gateway_bot.domain.messages import Reply
from gateway_bot.state.leases_store import LeaseStore

log = logging.getLogger(__name__)

SETTLE_S = 30.0
"""How often taking up a conversation warns while the run this replica stopped there has
not ended (it waits on)."""


class Claims:
    """This replica's conversation claims. ``wake``: the dispatch loop's, set when a task
    waits for a claim or a hand-back may have left work behind."""

    def __init__(
        self,
        leases: LeaseStore,
        service: GatewayService,
        replica_id: str,
        wake: asyncio.Event,
        clock: Callable[[], float],
    ) -> None:
        self._leases = leases
        self._service = service
        self._scheduler = service.scheduler
        self._id = replica_id
        self._wake = wake
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
        self.buried = False
        """Declared dead by another replica while alive (a heartbeat late, under load):
        until the dispatch loop has let go of every claim, it holds none."""

    @property
    def count(self) -> int:
        return len(self._held)

    # -- ConversationClaims ----------------------------------------------------------------

    def holds(self, conversation_id: str) -> bool:
        return (
            conversation_id in self._held
            and conversation_id not in self._taking_up
            and not self.buried
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
        if self._held.get(conversation_id) != token or self.buried:
            return False
        return await self._leases.record_reply_fenced(
            task_id, reply, conversation_id, self._id, token
        )

    # -- the dispatch loop's rounds ----------------------------------------------------------

    async def claim_free(self, room: int, but_channels: Sequence[str]) -> None:
        """Claim up to ``room`` free conversations with unfinished tasks (none of
        ``but_channels``), oldest task first, and start taking each up."""
        for conversation_id in await self._leases.claimable(room, but_channels):
            if self.buried:
                return  # the next round lets go first
            if conversation_id in self._taking_up:
                continue  # the take-up of a claim let go at a rejoin is still ending
            token = await self._leases.claim(conversation_id, self._id, self._clock())
            if token is None:
                continue  # another replica was quicker
            self._held[conversation_id] = token
            self._hand_back_failed.discard(conversation_id)
            self._taking_up.add(conversation_id)
            self._service.spawn(
                self._take_up(conversation_id, token), name=f"take-up-{conversation_id}"
            )

    async def queue_pending(self, only: str | None = None) -> None:
        """Queue, oldest first, the pending tasks of the conversations this replica holds
        that are not queued here yet: routed by another replica's intake, or left by the
        previous holder. ``only``: the conversation being taken up, which is held from the
        moment the store has answered (no await between), so a message its intake queues
        meanwhile cannot go ahead of the older ones read here."""
        pending = await self._leases.pending_of(self._id)
        if only is not None:
            self._taking_up.discard(only)
        for conversation_id, task_id in pending:
            if only is not None and conversation_id != only:
                continue
            if self.holds(conversation_id) and not self._scheduler.in_lane(
                conversation_id, task_id
            ):
                self._scheduler.enqueue(conversation_id, task_id)

    def hand_back_idle(self) -> None:
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

    def let_go(self, *, abandon: bool) -> None:
        """Forget every claim: the replica left (its lanes are shut down already) or was
        declared dead (``abandon``: each lane's queued tasks leave it and its run stops
        unanswered; the store keeps them pending or executing for the next holder)."""
        if abandon:
            for conversation_id in self._held:
                self._scheduler.abandon(conversation_id)
        self._held.clear()
        self._hand_back_failed.clear()
        self._era += 1

    # -- a claim's life ------------------------------------------------------------------------

    async def _take_up(self, conversation_id: str, token: int) -> None:
        """Finish what the previous holder left, then queue the pending tasks. Each step
        first asks whether the claim is still this one (a rejoin lets it go meanwhile):
        a take-up of a claim let go acts on nothing and hands back nothing."""

        def ours() -> bool:
            return self._held.get(conversation_id) == token and not self.buried

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
                await self.queue_pending(conversation_id)
        finally:
            self._taking_up.discard(conversation_id)
            if ours() and self._scheduler.depth(conversation_id) == 0:
                self.drained(conversation_id)

    async def _unclaim(self, conversation_id: str, token: int, era: int) -> None:
        try:
            await self._leases.unclaim(conversation_id, self._id, token)
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
                self._id,
                conversation_id,
                exc,
            )
            return
        self._wake.set()  # it may have work again already (another replica's intake)
