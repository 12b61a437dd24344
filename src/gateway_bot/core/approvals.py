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
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from gateway_bot.config.access import AccessSettings, SenderPolicy
from gateway_bot.core.approval_cards import (
    SHOWN_MESSAGES,
    HeldSummary,
    Outcome,
    approval_action,
    decided_card,
    parse_approval_action,
    pending_card,
    preview,
    room_label,
)
from gateway_bot.core.channel import ChannelAdapter
from gateway_bot.core.retries import DEFAULT_POLICY, RetryPolicy, call_channel
from gateway_bot.core.revocations import revoke_approval
from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from gateway_bot.domain.messages import InboundMessage, RoomInvite
from gateway_bot.domain.records import ApprovalRecord, ApprovalState, TaskRecord
from gateway_bot.state.store import Store

__all__ = [
    "Gatekeeper",
    "Verdict",
    "approval_action",
    "decided_card",
    "parse_approval_action",
    "pending_card",
]

log = logging.getLogger(__name__)

ReleaseTask = Callable[[str], Awaitable[None]]

CARD_REFRESH_S = 2.0
"""A pending card is edited at most this often however fast its sender writes."""


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
        self._timezone = timezone
        self._card_refresh_s = card_refresh_s
        self._cards = asyncio.Lock()
        """Held around every card send or edit and every decision, so an edit of a pending
        card can never land after the edit that decided it, and "shown" is exactly what the
        card said when the owner pressed."""
        self._refresh_due: set[str] = set()
        self._refreshing: set[asyncio.Task[None]] = set()
        self._retry_policy = retry_policy
        self._posting: set[str] = set()
        """Cards whose failed first post is being retried now."""

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
        """Join at once for an owner or admin; otherwise card the owner (Join / Ignore)."""
        adapter = self._adapters[invite.channel]
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
                await self._show(pending)

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
                await self._show(pending)
            elif task.id not in await approvals.shown_tasks(pending.code):
                self._refresh_later(pending.code)
        log.info(
            "held task %s from %s pending approval %s", task.id, message.sender_id, pending.code
        )
        return True

    def _refresh_later(self, code: str) -> None:
        """Edit the pending card once the burst settles: one edit per refresh period, not
        one per message, however many a sender writes."""
        if code in self._refresh_due:
            return
        self._refresh_due.add(code)
        job = asyncio.create_task(self._refresh(code))
        self._refreshing.add(job)
        job.add_done_callback(self._refreshing.discard)

    async def _refresh(self, code: str) -> None:
        await asyncio.sleep(self._card_refresh_s)
        # Due no more before editing: a message held during the edit schedules the next.
        self._refresh_due.discard(code)
        try:
            async with self._cards:
                approval = await self._store.approvals.get(code)
                if approval is not None and approval.state is ApprovalState.PENDING:
                    await self._show(approval)
        except Exception:
            log.warning("could not refresh approval card %s", code, exc_info=True)

    async def _show(self, approval: ApprovalRecord) -> None:
        """Send or edit the pending card; a first post that fails is retried by a job of its
        own, outside the locks (and by the service's sweep and at start-up, which find it
        without a message reference). Caller holds ``self._cards``."""
        try:
            await self._post_or_edit(approval)
        except Exception:
            log.warning("could not send approval card %s", approval.code, exc_info=True)
            if approval.card_ref is None:
                self._post_later(approval.code)

    def _post_later(self, code: str) -> None:
        if code in self._posting:
            return
        self._posting.add(code)
        job = asyncio.create_task(self._post_until_sent(code))
        self._refreshing.add(job)
        job.add_done_callback(self._refreshing.discard)

    async def _post_until_sent(self, code: str) -> None:
        async def attempt() -> None:
            async with self._cards:
                approval = await self._store.approvals.get(code)
                pending = approval is not None and approval.state is ApprovalState.PENDING
                if approval is not None and pending and approval.card_ref is None:
                    await self._post_or_edit(approval)

        try:
            await asyncio.sleep(self._retry_policy.first_wait_s)
            await call_channel(f"posting approval card {code}", attempt, self._retry_policy)
        except Exception as exc:
            log.warning("approval card %s is still not posted (%s); will try again", code, exc)
        finally:
            self._posting.discard(code)

    async def resend_unsent_cards(self) -> None:
        """Post the pending cards that never reached the owners (at start-up, and from the
        service's sweep): a failed post must not leave a message held until it expires."""
        for approval in await self._store.approvals.unsent_cards():
            self._post_later(approval.code)

    async def close(self) -> None:
        """Cancel pending card edits and posts (shutdown); the next start redoes them."""
        for job in list(self._refreshing):
            job.cancel()
        await asyncio.gather(*self._refreshing, return_exceptions=True)

    async def _post_or_edit(self, approval: ApprovalRecord) -> None:
        """Send or edit the pending card to quote the first held messages, then record which
        ones it quotes: those are what Allow runs. Raises what the channel raised."""
        destination = self._access.approval_destination
        assert destination is not None
        adapter = self._adapters.get(destination.channel)
        if adapter is None:
            log.error("approval destination channel %r is not running", destination.channel)
            return
        approvals = self._store.approvals
        held = await approvals.held_tasks(approval.code)
        quoted = held[:SHOWN_MESSAGES]
        bodies = []
        for task_id in quoted:
            parsed = (await self._store.get_task(task_id)).parsed
            bodies.append(parsed.body if parsed is not None else "")
        card = pending_card(approval, HeldSummary(tuple(bodies), len(held)))
        if approval.card_ref is None:
            ref = await adapter.send_card(destination.context, card)
            # Shown first: a crash between the two writes then costs a second card (posted
            # at the next start), not a held message that Allow would drop as unseen.
            await approvals.mark_shown(approval.code, quoted)
            await approvals.set_card(approval.code, destination.channel, destination.context, ref)
            return
        await adapter.update_card(approval.card_context or {}, approval.card_ref, card)
        await approvals.mark_shown(approval.code, quoted)

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
            await self._update_card(decided, outcome)
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
        """``/revoke USER [everywhere | ROOM]`` (``core/revocations.py``)."""
        return await revoke_approval(
            self._store.approvals, self._access, channel, revoker_id, here, argument
        )

    async def _settle_invite(
        self, approval: ApprovalRecord, state: ApprovalState, held: list[str]
    ) -> None:
        adapter = self._adapters.get(approval.channel)
        if adapter is not None:
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
                await self._update_card(expired, None)

    async def _drop(self, task_ids: list[str], why: str) -> None:
        for task_id in task_ids:
            task = await self._store.get_task(task_id)
            if task.state is TaskState.AUTHENTICATING:
                await self._store.transition(
                    task_id, TaskState.COMPLETED, reason=CompletionReason.UNAUTHORIZED, error=why
                )

    async def _update_card(self, approval: ApprovalRecord, outcome: Outcome | None) -> None:
        if not (approval.card_channel and approval.card_ref is not None):
            return
        adapter = self._adapters.get(approval.card_channel)
        if adapter is None:
            return
        try:
            await adapter.update_card(
                approval.card_context or {},
                approval.card_ref,
                decided_card(approval, self._timezone, outcome),
            )
        except Exception:
            log.warning("could not update approval card %s", approval.code, exc_info=True)
