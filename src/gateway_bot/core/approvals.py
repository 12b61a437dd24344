"""The gate for senders a channel authenticated but its allow rules do not admit.

Under ``request_approval`` their messages are held (durably: the task waits in
AUTHENTICATING and is linked to the approval) and an owner gets one card per (room, sender)
with Allow and Deny. Only an owner's or admin's decision counts, from the identity they have
on the channel the decision came from. Allow makes the sender a member of that room and
releases the held messages in order; Deny drops them; an undecided card expires.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from gateway_bot.config.access import AccessSettings, SenderPolicy
from gateway_bot.core.channel import ChannelAdapter
from gateway_bot.core.lifecycle import CompletionReason, TaskState
from gateway_bot.core.messages import Button, Card, InboundMessage, RoomInvite
from gateway_bot.state.records import ApprovalRecord, ApprovalState, TaskRecord
from gateway_bot.state.store import Store

log = logging.getLogger(__name__)

ReleaseTask = Callable[[str], Awaitable[None]]

_ACTION_PREFIX = "approval"
_PREVIEW_LINES = 3


@dataclass(frozen=True)
class Verdict:
    admitted: bool
    """False: the task was held or refused here and needs nothing more from the caller."""


def approval_action(code: str, choice: str) -> str:
    return f"{_ACTION_PREFIX}:{code}:{choice}"


def parse_approval_action(action_id: str) -> tuple[str, str] | None:
    parts = action_id.split(":")
    if len(parts) != 3 or parts[0] != _ACTION_PREFIX or parts[2] not in ("allow", "deny"):
        return None
    return parts[1], parts[2]


class Gatekeeper:
    def __init__(
        self,
        store: Store,
        access: AccessSettings,
        adapters: Mapping[str, ChannelAdapter],
        release: ReleaseTask,
        timezone: str,
    ) -> None:
        self._store = store
        self._access = access
        self._adapters = adapters
        self._release = release
        self._timezone = timezone

    async def admit(self, task: TaskRecord, message: InboundMessage) -> Verdict:
        channel, sender = message.channel, message.sender_id
        if message.sender_allowed or self._access.may_decide(channel, sender):
            return Verdict(True)
        if await self._store.approvals.is_member(channel, message.room, sender):
            return Verdict(True)
        policy = self._access.room_settings(channel, message.room).sender_policy
        if policy is SenderPolicy.PUBLIC:
            return Verdict(True)
        if policy is SenderPolicy.STRICT or self._access.approval_destination is None:
            why = "strict room" if policy is SenderPolicy.STRICT else "no approval destination"
            log.warning(
                "dropped message from unknown sender %s in %s (%s)", sender, message.room, why
            )
            await self._store.transition(
                task.id,
                TaskState.COMPLETED,
                reason=CompletionReason.UNAUTHORIZED,
                error=f"unknown sender ({why})",
            )
            return Verdict(False)
        await self._hold(task, message)
        return Verdict(False)

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
            await self._send_card(pending)
        else:
            await approvals.hold(pending.code, task.id)

    async def _hold(self, task: TaskRecord, message: InboundMessage) -> None:
        approvals = self._store.approvals
        await self._store.save_parsed(task.id, message)
        pending = await approvals.pending_for(message.channel, message.room, message.sender_id)
        if pending is None:
            pending = await approvals.create(
                channel=message.channel,
                room=message.room,
                room_title=message.room_title or message.room or message.conversation_key,
                sender_id=message.sender_id,
                sender_name=message.sender_name,
                preview="\n".join(message.body.strip().splitlines()[:_PREVIEW_LINES]),
                expires_at=time.time() + self._access.approval_expiry_hours * 3600,
            )
            await approvals.hold(pending.code, task.id)
            await self._send_card(pending)
        else:
            await approvals.hold(pending.code, task.id)
        log.info(
            "held task %s from %s pending approval %s", task.id, message.sender_id, pending.code
        )

    async def _send_card(self, approval: ApprovalRecord) -> None:
        destination = self._access.approval_destination
        assert destination is not None
        adapter = self._adapters.get(destination.channel)
        if adapter is None:
            log.error("approval destination channel %r is not running", destination.channel)
            return
        ref = await adapter.send_card(destination.context, pending_card(approval))
        await self._store.approvals.set_card(
            approval.code, destination.channel, destination.context, ref
        )

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
        approval = await self._store.approvals.get(code)
        if approval is None:
            return f"There is no approval {code}."
        state = ApprovalState.ALLOWED if choice == "allow" else ApprovalState.DENIED
        if not await self._store.approvals.decide(code, state, decider_name or decider_id):
            return f"Approval {code} was already {approval.state.value}."
        decided = await self._store.approvals.get(code)
        assert decided is not None
        held = await self._store.approvals.held_tasks(code)
        if approval.kind == "room":
            await self._settle_invite(approval, state, held)
        elif state is ApprovalState.ALLOWED:
            await self._store.approvals.add_member(
                approval.channel, approval.room, approval.sender_id, decider_id
            )
            for task_id in held:
                await self._release(task_id)
        else:
            await self._drop(held, f"denied by {decider_id}")
        await self._update_card(decided)
        if approval.kind == "room":
            verb = "Joined" if state is ApprovalState.ALLOWED else "Ignored the invite to"
            return f"{verb} {approval.room_title}."
        verb = "Allowed" if state is ApprovalState.ALLOWED else "Denied"
        return f"{verb} {approval.sender_name} in {approval.room_title} ({len(held)} held)."

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
        for approval in await self._store.approvals.expired(time.time()):
            if not await self._store.approvals.decide(
                approval.code, ApprovalState.EXPIRED, "expiry"
            ):
                continue
            held = await self._store.approvals.held_tasks(approval.code)
            log.info(
                "approval %s for %s expired; dropping %d held message(s)",
                approval.code,
                approval.sender_id,
                len(held),
            )
            await self._drop(held, "approval expired")
            expired = await self._store.approvals.get(approval.code)
            assert expired is not None
            await self._update_card(expired)

    async def _drop(self, task_ids: list[str], why: str) -> None:
        for task_id in task_ids:
            task = await self._store.get_task(task_id)
            if task.state is TaskState.AUTHENTICATING:
                await self._store.transition(
                    task_id, TaskState.COMPLETED, reason=CompletionReason.UNAUTHORIZED, error=why
                )

    async def _update_card(self, approval: ApprovalRecord) -> None:
        if not (approval.card_channel and approval.card_ref is not None):
            return
        adapter = self._adapters.get(approval.card_channel)
        if adapter is None:
            return
        try:
            await adapter.update_card(
                approval.card_context or {},
                approval.card_ref,
                decided_card(approval, self._timezone),
            )
        except Exception:
            log.warning("could not update approval card %s", approval.code, exc_info=True)


def pending_card(approval: ApprovalRecord) -> Card:
    if approval.kind == "room":
        return Card(
            title=f"Invitation to {approval.room_title}",
            body=(
                f"{approval.sender_name} ({approval.sender_id}) invited the bot to "
                f"{approval.room_title} ({approval.channel}). Join, or ignore the invitation? "
                f"Or reply !approve {approval.code} or !deny {approval.code}."
            ),
            buttons=(
                Button(
                    "Join", approval_action(approval.code, "allow"), emoji="✅", style="primary"
                ),
                Button(
                    "Ignore", approval_action(approval.code, "deny"), emoji="❌", style="danger"
                ),
            ),
        )
    quoted = "\n".join(f"> {line}" for line in approval.preview.splitlines())
    return Card(
        title=f"Unknown sender in {approval.room_title}",
        body=(
            f"{approval.sender_name} ({approval.sender_id}) wrote in {approval.room_title} "
            f"({approval.channel}):\n{quoted}\n\nAllow runs their message and lets them use "
            f"the bot in this room. Or reply !approve {approval.code} or !deny {approval.code}."
        ),
        buttons=(
            Button("Allow", approval_action(approval.code, "allow"), emoji="✅", style="primary"),
            Button("Deny", approval_action(approval.code, "deny"), emoji="❌", style="danger"),
        ),
    )


def decided_card(approval: ApprovalRecord, timezone: str) -> Card:
    when = datetime.datetime.fromtimestamp(approval.decided_at or time.time(), ZoneInfo(timezone))
    if approval.state is ApprovalState.EXPIRED:
        outcome = f"Expired at {when:%Y-%m-%d %H:%M} {timezone}; the held messages were dropped."
    elif approval.kind == "room":
        verb = "Joined" if approval.state is ApprovalState.ALLOWED else "Ignored"
        outcome = f"{verb} by {approval.decided_by} at {when:%Y-%m-%d %H:%M} {timezone}."
    else:
        verb = "Allowed" if approval.state is ApprovalState.ALLOWED else "Denied"
        outcome = f"{verb} by {approval.decided_by} at {when:%Y-%m-%d %H:%M} {timezone}."
    return Card(
        title=f"{approval.sender_name} in {approval.room_title}",
        body=f"{approval.sender_name} ({approval.sender_id}) in {approval.room_title}: {outcome}",
        buttons=(),
    )
