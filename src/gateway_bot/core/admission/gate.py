"""The gate for senders a channel authenticated but its allow rules do not admit.

Only messages that engage the bot reach the gate (the service decides engagement first), so
strangers talking among themselves are never quoted to anyone. Under ``request_approval``
an engaging message is held (durably: the task waits in AUTHENTICATING and is linked to the
approval) and an owner gets one card per (room, sender) with Allow and Deny. Further
messages while the card is undecided do not make new cards: the card is edited, at most
once per ``CARD_REFRESH_S``, to quote the first few and count the rest. Only an owner's or
admin's decision counts, from the identity they have on the channel the decision came from.
Allow makes the sender a member of that room and releases, in order, only the held messages
the card quoted; Deny drops them all; an undecided card expires. Owners can take an
approval back with ``/revoke``.

Cards themselves (posting, coalesced edits, retries, the text card of a channel without
buttons) are ``core/admission/card_posting.py``'s; their wording ``core/admission/cards.py``'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from gateway_bot.config.access import AccessSettings, SenderPolicy
from gateway_bot.core.admission.card_posting import CARD_REFRESH_S, CardPosting
from gateway_bot.core.admission.cards import Outcome, preview, room_label
from gateway_bot.core.channel import ChannelAdapter, RoomInvitations
from gateway_bot.core.commands.revoke import revoke_approval
from gateway_bot.core.retries import DEFAULT_POLICY, RetryPolicy
from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from gateway_bot.domain.messages import InboundMessage, RoomInvite
from gateway_bot.domain.records import ApprovalRecord, ApprovalState, TaskRecord
from gateway_bot.state.store import Store

log = logging.getLogger(__name__)

ReleaseTask = Callable[[str], Awaitable[None]]


@dataclass(frozen=True)
class Verdict:
    admitted: bool
    """False: the task was held or refused here and needs nothing more from the caller."""


class Gatekeeper:
    def __init__(
        self,
        store: Store,
        access: AccessSettings,
        adapters: Mapping[str, ChannelAdapter],
        release: ReleaseTask,
        timezone: str,
        *,
        card_refresh_s: float = CARD_REFRESH_S,
        retry_policy: RetryPolicy = DEFAULT_POLICY,
    ) -> None:
        self._store = store
        self._access = access
        self._adapters = adapters
        self._release = release
        self._posts = CardPosting(
            store,
            access,
            adapters,
            timezone,
            card_refresh_s=card_refresh_s,
            retry_policy=retry_policy,
        )
        self._cards = self._posts.lock
        """Held around every card send or edit and every decision, so an edit of a pending
        card can never land after the edit that decided it, and "shown" is exactly what the
        card said when the owner pressed."""

    async def trusts(self, message: InboundMessage) -> bool:
        """May this sender use the bot here without an owner's say (also for commands)?"""
        channel, sender = message.channel, message.sender_id
        if message.sender_allowed or self._access.may_decide(channel, sender):
            return True
        policy = self._access.room_settings(channel, message.room).sender_policy
        if policy is SenderPolicy.PUBLIC:
            return True
        return await self._store.approvals.is_member(channel, message.room, sender)

    async def admit(self, task: TaskRecord, message: InboundMessage) -> Verdict:
        """For a message that engages the bot: pass it, or hold it for an owner, or drop it."""
        if await self.trusts(message):
            return Verdict(True)
        policy = self._access.room_settings(message.channel, message.room).sender_policy
        if policy is SenderPolicy.STRICT or self._access.approval_destination is None:
            why = "strict room" if policy is SenderPolicy.STRICT else "no approval destination"
            log.warning(
                "dropped message from unknown sender %s in %s (%s)",
                message.sender_id,
                message.room,
                why,
            )
            await self._store.transition(
                task.id,
                TaskState.COMPLETED,
                reason=CompletionReason.UNAUTHORIZED,
                error=f"unknown sender ({why})",
            )
            return Verdict(False)
        return Verdict(not await self._hold(task, message))

    async def admit_invite(self, task: TaskRecord, invite: RoomInvite) -> None:
        """Join at once for an owner or admin; otherwise card the owner (Join / Ignore).
        A channel that cannot join rooms (no ``RoomInvitations``) has nothing to offer."""
        adapter = self._adapters[invite.channel]
        if not isinstance(adapter, RoomInvitations):
            log.warning("ignored invite to %s: %s cannot join rooms", invite.room, invite.channel)
            await self._store.transition(
                task.id,
                TaskState.COMPLETED,
                reason=CompletionReason.REJECTED,
                error="this channel cannot join rooms",
            )
            return
        if self._access.may_decide(invite.channel, invite.inviter_id):
            await adapter.join_room(invite.room)
            await self._store.transition(
                task.id, TaskState.COMPLETED, reason=CompletionReason.SUCCESS
            )
            return
        if self._access.approval_destination is None:
            log.warning(
                "declined invite to %s from %s: no approval destination",
                invite.room,
                invite.inviter_id,
            )
            await adapter.leave_room(invite.room)
            await self._store.transition(
                task.id,
                TaskState.COMPLETED,
                reason=CompletionReason.UNAUTHORIZED,
                error="invite from a non-owner",
            )
            return
        approvals = self._store.approvals
        async with self._cards:
            pending = await approvals.pending_for(invite.channel, invite.room, invite.inviter_id)
            if pending is None:
                pending = await approvals.create(
                    channel=invite.channel,
                    room=invite.room,
                    room_title=invite.room_title or invite.room,
                    sender_id=invite.inviter_id,
                    sender_name=invite.inviter_name,
                    preview="",
                    expires_at=time.time() + self._access.approval_expiry_hours * 3600,
                    kind="room",
                )
            await approvals.hold(pending.code, task.id)
            if pending.card_ref is None:
                await self._posts.show(pending)

    async def _hold(self, task: TaskRecord, message: InboundMessage) -> bool:
        """Hold the message under its sender's pending card (made if need be); False when
        an owner allowed the sender meanwhile (a decision from another channel), so the
        message passes instead of starting a new card."""
        approvals = self._store.approvals
        await self._store.save_parsed(task.id, message)
        async with self._cards:
            if await approvals.is_member(message.channel, message.room, message.sender_id):
                return False
            pending = await approvals.pending_for(message.channel, message.room, message.sender_id)
            if pending is None:
                pending = await approvals.create(
                    channel=message.channel,
                    room=message.room,
                    room_title=message.room_title or message.room or message.conversation_key,
                    sender_id=message.sender_id,
                    sender_name=message.sender_name,
                    preview=preview(message.body),
                    expires_at=time.time() + self._access.approval_expiry_hours * 3600,
                )
            await approvals.hold(pending.code, task.id)
            if pending.card_ref is None:
                # The first message: the card goes out now. (Also a card whose sending
                # failed earlier: the next held message, or the next start, sends it.)
                await self._posts.show(pending)
            elif task.id not in await approvals.shown_tasks(pending.code):
                self._posts.refresh_later(pending.code)
        log.info(
            "held task %s from %s pending approval %s", task.id, message.sender_id, pending.code
        )
        return True

    async def resend_unsent_cards(self) -> None:
        """Post the pending cards that never reached the owners (start-up, the sweep)."""
        await self._posts.resend_unsent()

    async def close(self) -> None:
        """Cancel pending card edits and posts (shutdown); the next start redoes them."""
        await self._posts.close()

    def may_decide(self, channel: str, identity: str) -> bool:
        """An owner or admin of ``channel``: told whether a code exists and what it is."""
        return self._access.may_decide(channel, identity)

    def decides_somewhere(self, identity: str) -> bool:
        return self._access.decides_somewhere(identity)

    async def decide(
        self, channel: str, decider_id: str, decider_name: str, code: str, choice: str
    ) -> str | None:
        """Apply a decision; returns a line for the decider, None when it was ignored."""
        if not self._access.may_decide(channel, decider_id):
            log.warning(
                "ignored approval decision on %s by %s (%s): not an owner or admin",
                code,
                decider_id,
                channel,
            )
            return None
        approvals = self._store.approvals
        async with self._cards:
            approval = await approvals.get(code)
            if approval is None:
                return f"There is no approval {code}."
            state = ApprovalState.ALLOWED if choice == "allow" else ApprovalState.DENIED
            if not await approvals.decide(code, state, decider_name or decider_id):
                return f"Approval {code} was already {approval.state.value}."
            decided = await approvals.get(code)
            assert decided is not None
            held = await approvals.held_tasks(code)
            outcome = None
            if approval.kind == "room":
                await self._settle_invite(approval, state, held)
            elif state is ApprovalState.ALLOWED:
                shown = await approvals.shown_tasks(code)
                unseen = [task_id for task_id in held if task_id not in shown]
                await approvals.add_member(
                    approval.channel, approval.room, approval.sender_id, decider_id
                )
                await self._drop(unseen, "not shown on the approval card")
                for task_id in shown:
                    await self._release(task_id)
                outcome = Outcome(ran=len(shown), dropped_unseen=len(unseen))
            else:
                await self._drop(held, f"denied by {decider_id}")
            await self._posts.close_decided(decided, outcome)
        where = room_label(approval.room_title, approval.room)
        if approval.kind == "room":
            verb = "Joined" if state is ApprovalState.ALLOWED else "Ignored the invite to"
            return f"{verb} {where}."
        if outcome is None:
            return f"Denied {approval.sender_name} in {where} ({len(held)} held dropped)."
        text = f"Allowed {approval.sender_name} in {where}: running {outcome.ran} held message(s)"
        if outcome.dropped_unseen:
            text += f"; dropped {outcome.dropped_unseen} the card did not show"
        return text + "."

    async def revoke(self, channel: str, revoker_id: str, here: str, argument: str) -> str:
        """``/revoke USER [everywhere | ROOM]`` (``core/commands/revoke.py``)."""
        return await revoke_approval(
            self._store.approvals, self._access, channel, revoker_id, here, argument
        )

    async def _settle_invite(
        self, approval: ApprovalRecord, state: ApprovalState, held: list[str]
    ) -> None:
        adapter = self._adapters.get(approval.channel)
        if isinstance(adapter, RoomInvitations):
            if state is ApprovalState.ALLOWED:
                await adapter.join_room(approval.room)
            else:
                await adapter.leave_room(approval.room)
        for task_id in held:
            task = await self._store.get_task(task_id)
            if task.state is TaskState.AUTHENTICATING:
                reason = (
                    CompletionReason.SUCCESS
                    if state is ApprovalState.ALLOWED
                    else CompletionReason.UNAUTHORIZED
                )
                await self._store.transition(task_id, TaskState.COMPLETED, reason=reason)

    async def expire(self) -> None:
        """Drop the messages of cards nobody decided in time. Runs at start and periodically."""
        approvals = self._store.approvals
        for approval in await approvals.expired(time.time()):
            async with self._cards:
                if not await approvals.decide(approval.code, ApprovalState.EXPIRED, "expiry"):
                    continue
                held = await approvals.held_tasks(approval.code)
                log.info(
                    "approval %s for %s expired; dropping %d held message(s)",
                    approval.code,
                    approval.sender_id,
                    len(held),
                )
                await self._drop(held, "approval expired")
                expired = await approvals.get(approval.code)
                assert expired is not None
                await self._posts.close_decided(expired, None)

    async def _drop(self, task_ids: list[str], why: str) -> None:
        for task_id in task_ids:
            task = await self._store.get_task(task_id)
            if task.state is TaskState.AUTHENTICATING:
                await self._store.transition(
                    task_id, TaskState.COMPLETED, reason=CompletionReason.UNAUTHORIZED, error=why
                )
