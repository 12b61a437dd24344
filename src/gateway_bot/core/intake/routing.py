"""Routing a stored message: authenticate and parse it by its channel, then answer a
command at once, apply a card decision, admit an invitation, drop what strangers said, or
queue an engaging message in its conversation (``core/conversations/queue.py``).

Split from ``core/service.py``; the intake around it (the store commit, the per-channel
order and retries) is ``core/intake/intake.py``: this module decides what a message IS and where
it goes, and is called under the channel's intake lock (what must not hold that lock, a
/diff, it hands back to intake to run once the lock is released).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import logging
from collections import defaultdict
from collections.abc import Mapping

from gateway_bot.config.access import AccessSettings, IgnoredMessages
from gateway_bot.core.actions.approvals import ActionApprovals
from gateway_bot.core.actions.cards import parse_action_id
from gateway_bot.core.admission.cards import parse_approval_action
from gateway_bot.core.admission.engagement import engages, is_blank
from gateway_bot.core.admission.gate import Gatekeeper
from gateway_bot.core.channel import (
    AuthenticationError,
    ChannelAdapter,
    SenderRecheck,
    TellsDecider,
)
from gateway_bot.core.commands.effects import ChatCommands
from gateway_bot.core.commands.mail import ConversationMailer
from gateway_bot.core.commands.parse import Command, CommandName, UnknownCommand, parse_command
from gateway_bot.core.conversations.delivery import ReplyDelivery
from gateway_bot.core.conversations.queue import Scheduler
from gateway_bot.core.intake.intake import AfterLock
from gateway_bot.core.intake.lone_files import LoneFiles
from gateway_bot.core.retries import is_transient
from gateway_bot.core.schedules.proposals import ScheduleProposals, parse_proposal_action
from gateway_bot.core.schedules.runner import ScheduleRunner
from gateway_bot.domain.lifecycle import CompletionReason, TaskKind, TaskState
from gateway_bot.domain.messages import Decision, InboundMessage, RoomInvite
from gateway_bot.domain.records import ContextLine, ConversationRecord, TaskRecord
from gateway_bot.state.store import Store

log = logging.getLogger(__name__)

COMMAND = TaskKind.COMMAND


class _Unread(enum.Enum):
    """A conversation not read yet (None is read and absent)."""

    UNREAD = "unread"


UNREAD = _Unread.UNREAD
"""What commands, card decisions and typed answers are recorded as (apart from agent
tasks in the operator's lists, charts and metrics)."""


@dataclasses.dataclass
class Router:
    """What routing needs of the service's parts (all shared with it, none owned here)."""

    _store: Store
    _adapters: Mapping[str, ChannelAdapter]
    _access: AccessSettings
    _gate: Gatekeeper
    _mail: ConversationMailer
    _replies: ReplyDelivery
    _commands: ChatCommands
    _scheduler: Scheduler
    schedules: ScheduleRunner | None
    _proposals: ScheduleProposals | None
    action_approvals: ActionApprovals | None
    _lone_files: LoneFiles
    _diffs: defaultdict[str, asyncio.Lock] = dataclasses.field(
        default_factory=lambda: defaultdict(asyncio.Lock)
    )
    """One /diff at a time per channel, as under the intake lock: each holds a scratch
    repository, a git and threads of the daemon's."""

    async def route(self, task_id: str, known: TaskRecord | None = None) -> AfterLock | None:
        """Called under the channel's intake lock; returns what intake runs once it is
        released (answering a /diff), in the same job and under the same retries.
        ``known``: the task as just committed (not read again; a transition from it that
        finds the row moved reads it then)."""
        task = known if known is not None else await self._store.get_task(task_id)
        if task.state is TaskState.QUEUED:
            task = await self._store.transition(task_id, TaskState.AUTHENTICATING, known=task)
        elif task.state is not TaskState.AUTHENTICATING:
            return None  # routed by an earlier attempt that failed afterwards
        if self.schedules is not None:
            scheduled = await self.schedules.run_message(task)
            if scheduled is not None:
                await self._route_scheduled(task, scheduled)
                return None
        adapter = self._adapters[task.channel]
        try:
            message = await adapter.authenticate_and_parse(task.raw)
        except AuthenticationError as exc:
            reason = (
                CompletionReason.UNAUTHORIZED if exc.unauthorized else CompletionReason.AUTH_FAILED
            )
            log.warning("task %s refused: %s (%s)", task_id, exc.sender, exc.reason)
            await self._store.transition(
                task_id, TaskState.COMPLETED, reason=reason, error=exc.reason
            )
            return None
        except Exception as exc:
            if is_transient(exc):
                raise
            # The same payload fails the same way every time: never retried.
            log.warning("task %s: %s cannot parse it: %r", task_id, task.channel, exc)
            await self._store.transition(
                task_id,
                TaskState.COMPLETED,
                reason=CompletionReason.REJECTED,
                error=f"could not be parsed: {type(exc).__name__}: {exc}",
            )
            return None
        if message is None:
            await self._store.transition(
                task_id,
                TaskState.COMPLETED,
                reason=CompletionReason.REJECTED,
                error="nothing to act on",
            )
            return None
        if isinstance(message, Decision):
            await self._apply_decision(task, message)
            return None
        if isinstance(message, RoomInvite):
            await self._gate.admit_invite(task, message)
            return None
        return await self._route(task, message)

    async def _one_diff(
        self,
        task: TaskRecord,
        message: InboundMessage,
        conversation: ConversationRecord,
        command: Command,
    ) -> None:
        async with self._diffs[message.channel]:
            await self._answer_command(task, message, conversation, command)

    async def _answer_command(
        self,
        task: TaskRecord,
        message: InboundMessage,
        conversation: ConversationRecord,
        command: Command,
    ) -> None:
        reply = await self._commands.reply(conversation, message, command, task.id)
        await self._replies.answer_now(
            task, message, reply.text, CompletionReason.SUCCESS, files=reply.files, kind=COMMAND
        )

    async def release_held(self, task_id: str) -> None:
        """An owner allowed the sender: the held message (it engaged the bot when it was
        held) joins its conversation as if it had just passed the gate. A held task its
        channel could not re-authenticate lately is back in QUEUED: released all the same."""
        task = await self._store.get_task(task_id)
        if task.state is TaskState.QUEUED and task.parsed is not None:
            task = await self._store.transition(task_id, TaskState.AUTHENTICATING)
        if task.state is not TaskState.AUTHENTICATING or task.parsed is None:
            return
        await self._queue_engaging(task, task.parsed)

    async def _route(self, task: TaskRecord, message: InboundMessage) -> AfterLock | None:
        """Engagement before the sender gate: only a message addressed to the bot can be
        held and carded, so strangers talking among themselves are never quoted to an
        owner, and their words never become context. Commands run at once for senders the
        gate trusts; a stranger's command (a /stop, a /new) is dropped unanswered."""
        message = await self._mail.vetted(message)
        trusted = await self._gate.trusts(message)
        try:
            command = parse_command(message.body)
        except UnknownCommand as exc:
            if trusted:
                await self._replies.answer_now(
                    task, message, str(exc), CompletionReason.REJECTED, kind=COMMAND
                )
            else:
                await self._drop_untrusted(task, message, "command")
            return None
        if command is not None:
            if not trusted:
                await self._drop_untrusted(task, message, "command")
                return None
            conversation = await self._conversation_for(message)
            if command.name is CommandName.DIFF:
                # It reads the agent's workspace, which can make that take its whole 120 s
                # (a FIFO where git reads a .gitignore): not with every message of the
                # channel waiting behind it. Intake runs it after the lock, in the task's
                # intake job (its retries; a crash leaves the task AUTHENTICATING, and the
                # next start routes it again).
                return functools.partial(self._one_diff, task, message, conversation, command)
            await self._answer_command(task, message, conversation, command)
            return None
        room = self._access.room_settings(message.channel, message.room)
        # Beside the read below (two trips to the store's thread at once, not one after
        # the other: issue 33), for a message that engages whatever that read finds (a
        # DM, a mention): chatter leaves no record. Unused, the record posts nothing.
        sure = trusted and engages(message, room, False) and not is_blank(message.body)
        prepared = self._scheduler.preparing(task.id, message) if sure else None
        started = await self._store.active_conversation(message.channel, message.conversation_key)
        if trusted and started is not None and self.action_approvals is not None:
            answered = await self.action_approvals.answer_reply(started.id, message)
            if answered is not None:
                await self._replies.answer_now(
                    task, message, answered, CompletionReason.SUCCESS, kind=COMMAND
                )
                return None
        if not engages(message, room, started is not None):
            if room.ignored is IgnoredMessages.ACCUMULATE and trusted:
                line = ContextLine(message.sender_name, message.body, message.received_at)
                await self._store.context_lines.add(
                    message.channel, message.conversation_key, line, room.context_size
                )
            await self._store.transition(
                task.id,
                TaskState.COMPLETED,
                reason=CompletionReason.REJECTED,
                error="not addressed to the bot",
            )
            return None
        if is_blank(message.body) and not message.attachments:
            if trusted:
                await self._replies.answer_now(
                    task,
                    message,
                    "Your message was empty: nothing to do.",
                    CompletionReason.REJECTED,
                )
            else:
                await self._drop_untrusted(task, message, "empty message")
            return None
        if not (await self._gate.admit(task, message)).admitted:
            return None
        gathered = self._lone_files.gather(task.id, message)
        if gathered.message is None:
            return None  # only files: they wait (AUTHENTICATING) for the words about them
        await self._queue_engaging(task, gathered.message, started, prepared)
        for joined in gathered.joined:
            await self._store.transition(
                joined,
                TaskState.COMPLETED,
                reason=CompletionReason.SUCCESS,
                error=f"its files went with task {task.id}",
            )
        return None

    async def _route_scheduled(self, task: TaskRecord, message: InboundMessage) -> None:
        """A schedule's run, as its creator's message: queued if the gate still trusts
        them here (an approval revoked since, or the sender removed from the channel's
        allowed users, stops their schedules' runs)."""
        message = await self._mail.vetted(message)
        adapter = self._adapters[message.channel]
        if isinstance(adapter, SenderRecheck) and message.sender_allowed:
            allowed = await adapter.still_allowed(message)
            message = dataclasses.replace(message, sender_allowed=allowed)
        if not await self._gate.trusts(message):
            await self._drop_untrusted(task, message, "scheduled run")
            return
        await self._queue_message(task, message)

    async def _drop_untrusted(self, task: TaskRecord, message: InboundMessage, what: str) -> None:
        """No answer, no card: the bot does not talk to senders nobody admitted."""
        log.warning(
            "dropped %s from unapproved sender %s in %s", what, message.sender_id, message.room
        )
        await self._store.transition(
            task.id,
            TaskState.COMPLETED,
            reason=CompletionReason.UNAUTHORIZED,
            error=f"{what} from a sender who is not allowed here",
        )

    async def _queue_engaging(
        self,
        task: TaskRecord,
        message: InboundMessage,
        active: ConversationRecord | _Unread | None = UNREAD,
        prepared: asyncio.Future[None] | None = None,
    ) -> None:
        """An admitted message that engages the bot: it takes the context kept since the
        last one (only admitted senders' words are kept) and joins its conversation.
        ``active``: the conversation key's active conversation as routing read it, under
        the channel's lock (not read again on the acknowledgement's way); ``prepared``:
        its acknowledgement's preparation, under way (``Scheduler.preparing``)."""
        # Only a room that keeps what did not engage has lines to hand over: elsewhere no
        # read (a trip to the store on the way to the acknowledgement, issue 33).
        room = self._access.room_settings(message.channel, message.room)
        context = (
            await self._store.context_lines.take(message.channel, message.conversation_key)
            if room.ignored is IgnoredMessages.ACCUMULATE
            else []
        )
        if context:
            message = dataclasses.replace(
                message, context=tuple(f"{c.sender_name}: {c.body}" for c in context)
            )
        await self._queue_message(task, message, active, prepared)

    async def _apply_decision(self, task: TaskRecord, decision: Decision) -> None:
        parsed = parse_approval_action(decision.action_id)
        proposed = parse_proposal_action(decision.action_id)
        action = parse_action_id(decision.action_id)
        reply = None
        who_may = None
        if action is not None and self.action_approvals is not None:
            who_may = self.action_approvals.who_may_decide
            reply = await self.action_approvals.decide(
                decision.channel, decision.decider_id, decision.decider_name, *action
            )
        elif proposed is not None and self._proposals is not None:
            who_may = "the person who asked for it or an owner or admin"
            reply = await self._proposals.decide(
                decision.channel, decision.decider_id, decision.decider_name, *proposed
            )
        elif parsed is not None:
            who_may = "an owner or admin"
            reply = await self._gate.decide(
                decision.channel, decision.decider_id, decision.decider_name, *parsed
            )
        else:
            log.warning("unknown card action %r by %s", decision.action_id, decision.decider_id)
        reason = CompletionReason.SUCCESS if reply else CompletionReason.UNAUTHORIZED
        await self._store.transition(
            task.id,
            TaskState.COMPLETED,
            reason=reason,
            error=None if reply else "decision ignored",
            kind=COMMAND,
        )
        if reply is None and who_may is not None:
            self._tell_refused(decision, f"Only {who_may} can decide this card: nothing changed.")

    def _tell_refused(self, decision: Decision, text: str) -> None:
        """The refused presser alone hears why (best effort, after the refusal is recorded):
        without a word, a press that changes nothing looks like a bot that is broken."""
        adapter = self._adapters[decision.channel]
        if not isinstance(adapter, TellsDecider):
            return
        self._scheduler.notices.tell(
            f"{decision.channel}: telling {decision.decider_id} their press was refused",
            lambda: adapter.tell_decider(decision, text),
        )

    async def _queue_message(
        self,
        task: TaskRecord,
        message: InboundMessage,
        active: ConversationRecord | _Unread | None = UNREAD,
        prepared: asyncio.Future[None] | None = None,
    ) -> None:
        conversation = await self._conversation_for(message, active)
        await self._scheduler.queue(task, message, conversation.id, prepared)

    async def _conversation_for(
        self, message: InboundMessage, active: ConversationRecord | _Unread | None = UNREAD
    ) -> ConversationRecord:
        existing = await self._mail.conversation_of(message)
        if existing is None:
            existing = (
                await self._store.active_conversation(message.channel, message.conversation_key)
                if isinstance(active, _Unread)
                else active
            )
        if existing is not None:
            return existing
        return await self._store.create_conversation(
            message.channel, message.conversation_key, None
        )
