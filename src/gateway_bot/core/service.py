"""The gateway service: accept, authenticate, queue, execute, reply, recover.

A message's path: a channel listener calls ``submit`` -> the message is committed to the
store (only then may the channel acknowledge it at its source) -> authenticated and parsed
by its channel -> commands are answered at once, other messages join their conversation's
queue -> one task at a time per conversation, at most N at once overall -> the reply is
stored, then sent, then the task completes. At start-up the recovery sweep picks up every
task a crash left behind, so each accepted message is answered exactly once.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from collections.abc import Coroutine, Mapping
from typing import Any

from gateway_bot.config.access import AccessSettings, IgnoredMessages
from gateway_bot.core.approvals import Gatekeeper, parse_approval_action
from gateway_bot.core.channel import AuthenticationError, ChannelAdapter
from gateway_bot.core.chat_commands import ChatCommands, RunningTask
from gateway_bot.core.commands import (
    UnknownCommand,
    parse_command,
)
from gateway_bot.core.delivery import ReplyDelivery
from gateway_bot.core.engagement import engages
from gateway_bot.core.executor import TaskExecutor, TaskResult
from gateway_bot.core.lifecycle import CompletionReason, TaskState
from gateway_bot.core.messages import Decision, InboundMessage, RawMessage, Reply, RoomInvite
from gateway_bot.core.progress import ProgressReporter
from gateway_bot.core.retries import call_channel
from gateway_bot.sandbox.base import SandboxUnavailable
from gateway_bot.state.records import ContextLine, ConversationRecord, TaskRecord
from gateway_bot.state.store import Store

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 60.0
"""How often undecided approval cards are checked for expiry."""


class GatewayService:
    def __init__(
        self,
        store: Store,
        adapters: Mapping[str, ChannelAdapter],
        executor: TaskExecutor,
        *,
        access: AccessSettings,
        timezone: str,
        max_concurrent_tasks: int,
        max_pending_per_conversation: int,
    ) -> None:
        self._store = store
        self._adapters = dict(adapters)
        self._executor = executor
        self._access = access
        self._gate = Gatekeeper(store, access, self._adapters, self._release_held, timezone)
        self._sweeper: asyncio.Task[None] | None = None
        self._running: dict[str, RunningTask] = {}
        self._replies = ReplyDelivery(store, self._adapters)
        self._commands = ChatCommands(store, self._gate, self._running, self.start_new_conversation)
        self._slots = asyncio.Semaphore(max_concurrent_tasks)
        self._max_pending = max_pending_per_conversation
        self._queues: dict[str, collections.deque[str]] = collections.defaultdict(collections.deque)
        self._drainers: dict[str, asyncio.Task[None]] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._intake_locks: dict[str, asyncio.Lock] = collections.defaultdict(asyncio.Lock)
        self._accepting = False
        self._idle = asyncio.Event()
        self._idle.set()

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Recover what a previous run left, then start every channel's listener."""
        await self.recover()
        await self._gate.expire()
        self._sweeper = asyncio.create_task(self._sweep_periodically())
        self._accepting = True
        for adapter in self._adapters.values():
            await adapter.listener.start(self.submit)

    async def _sweep_periodically(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            try:
                await self._gate.expire()
            except Exception:
                log.exception("approval expiry sweep failed")

    async def stop_listening(self) -> None:
        self._accepting = False
        if self._sweeper is not None:
            self._sweeper.cancel()
        for adapter in self._adapters.values():
            await adapter.listener.stop()

    async def wait_idle(self, timeout_s: float | None) -> bool:
        """Wait until no task is in flight; False if the timeout passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def shutdown(self, timeout_s: float) -> None:
        """Stop listening, let running tasks finish for up to ``timeout_s``, then abandon
        the rest where they stand: the next start's recovery re-runs them."""
        await self.stop_listening()
        if not await self.wait_idle(timeout_s):
            log.warning(
                "shutdown: tasks still running after %.0f s; they will be re-run at the next start",
                timeout_s,
            )
        for job in list(self._background):
            job.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    def _spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        job = asyncio.create_task(coroutine)
        self._background.add(job)
        self._idle.clear()

        def done(finished: asyncio.Task[Any]) -> None:
            self._background.discard(finished)
            if not self._background:
                self._idle.set()
            if not finished.cancelled() and finished.exception() is not None:
                log.error("background job failed", exc_info=finished.exception())

        job.add_done_callback(done)
        return job

    # -- intake ------------------------------------------------------------------------

    async def submit(self, raw: RawMessage) -> bool:
        """Durably accept a message. Returns True once it is safe to ack at the source."""
        if raw.channel not in self._adapters:
            raise ValueError(f"message from unknown channel {raw.channel!r}")
        task_id, is_new = await self._store.accept_inbound(raw)
        if not is_new:
            log.info(
                "duplicate delivery of %s/%s (task %s) ignored",
                raw.channel,
                raw.message_id,
                task_id,
            )
        elif self._accepting:
            self._spawn(self._authenticate(task_id))
        return True

    async def recover(self) -> None:
        """The start-up sweep: every task not completed is finished or re-run."""
        for task in await self._store.tasks_in_states(
            [TaskState.QUEUED, TaskState.AUTHENTICATING, TaskState.EXECUTING, TaskState.PENDING]
        ):
            if task.state is TaskState.AUTHENTICATING:
                task = await self._store.transition(task.id, TaskState.QUEUED)
            if task.state is TaskState.QUEUED:
                self._spawn(self._authenticate(task.id))
                continue
            if task.state is TaskState.EXECUTING:
                if task.reply is not None:
                    log.info("recovery: delivering the stored reply of task %s", task.id)
                    self._spawn(self._replies.finish(task))
                    continue
                log.info("recovery: task %s was interrupted mid-run; running it again", task.id)
                task = await self._store.transition(task.id, TaskState.PENDING)
            assert task.conversation_id is not None
            self._enqueue(task.conversation_id, task.id)

    async def _authenticate(self, task_id: str) -> None:
        """Authenticate and route one message. Serialised per channel, so messages reach
        their conversation (and commands take effect) in the order they arrived."""
        channel = (await self._store.get_task(task_id)).channel
        async with self._intake_locks[channel]:
            await self._authenticate_in_order(task_id)

    async def _authenticate_in_order(self, task_id: str) -> None:
        task = await self._store.transition(task_id, TaskState.AUTHENTICATING)
        adapter = self._adapters[task.channel]
        try:
            message = await call_channel(
                f"{task.channel}: parsing task {task_id}",
                lambda: adapter.authenticate_and_parse(task.raw),
            )
        except AuthenticationError as exc:
            reason = (
                CompletionReason.UNAUTHORIZED if exc.unauthorized else CompletionReason.AUTH_FAILED
            )
            log.warning("task %s refused: %s (%s)", task_id, exc.sender, exc.reason)
            await self._store.transition(
                task_id, TaskState.COMPLETED, reason=reason, error=exc.reason
            )
            return
        if message is None:
            await self._store.transition(
                task_id,
                TaskState.COMPLETED,
                reason=CompletionReason.REJECTED,
                error="nothing to act on",
            )
            return
        if isinstance(message, Decision):
            await self._apply_decision(task, message)
            return
        if isinstance(message, RoomInvite):
            await self._gate.admit_invite(task, message)
            return
        await self._route(task, message)

    async def _release_held(self, task_id: str) -> None:
        """An owner allowed the sender: the held message (it engaged the bot when it was
        held) joins its conversation as if it had just passed the gate."""
        task = await self._store.get_task(task_id)
        if task.state is not TaskState.AUTHENTICATING or task.parsed is None:
            return
        await self._queue_engaging(task, task.parsed)

    async def _route(self, task: TaskRecord, message: InboundMessage) -> None:
        """Engagement before the sender gate: only a message addressed to the bot can be
        held and carded, so strangers talking among themselves are never quoted to an
        owner, and their words never become context. Commands run at once for senders the
        gate trusts; a stranger's command (a /stop, a /new) is dropped unanswered."""
        trusted = await self._gate.trusts(message)
        try:
            command = parse_command(message.body)
        except UnknownCommand as exc:
            if trusted:
                await self._replies.answer_now(task, message, str(exc), CompletionReason.REJECTED)
            else:
                await self._drop_untrusted(task, message, "command")
            return
        if command is not None:
            if not trusted:
                await self._drop_untrusted(task, message, "command")
                return
            conversation = await self._conversation_for(message)
            text = await self._commands.answer(conversation, message, command)
            await self._replies.answer_now(task, message, text, CompletionReason.SUCCESS)
            return
        room = self._access.room_settings(message.channel, message.room)
        started = await self._store.active_conversation(message.channel, message.conversation_key)
        if not engages(message, room, started is not None):
            if room.ignored is IgnoredMessages.ACCUMULATE and trusted:
                line = ContextLine(message.sender_name, message.body, message.received_at)
                await self._store.approvals.add_context(
                    message.channel, message.conversation_key, line, room.context_size
                )
            await self._store.transition(
                task.id,
                TaskState.COMPLETED,
                reason=CompletionReason.REJECTED,
                error="not addressed to the bot",
            )
            return
        if not message.body.strip() and not message.attachments:
            if trusted:
                await self._replies.answer_now(
                    task,
                    message,
                    "Your message was empty: nothing to do.",
                    CompletionReason.REJECTED,
                )
            else:
                await self._drop_untrusted(task, message, "empty message")
            return
        if not (await self._gate.admit(task, message)).admitted:
            return
        await self._queue_engaging(task, message)

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

    async def _queue_engaging(self, task: TaskRecord, message: InboundMessage) -> None:
        """An admitted message that engages the bot: it takes the context kept since the
        last one (only admitted senders' words are kept) and joins its conversation."""
        context = await self._store.approvals.take_context(
            message.channel, message.conversation_key
        )
        if context:
            message = dataclasses.replace(
                message, context=tuple(f"{c.sender_name}: {c.body}" for c in context)
            )
        await self._queue_message(task, message)

    async def _apply_decision(self, task: TaskRecord, decision: Decision) -> None:
        parsed = parse_approval_action(decision.action_id)
        reply = None
        if parsed is not None:
            reply = await self._gate.decide(
                decision.channel, decision.decider_id, decision.decider_name, *parsed
            )
        else:
            log.warning("unknown card action %r by %s", decision.action_id, decision.decider_id)
        reason = CompletionReason.SUCCESS if reply else CompletionReason.UNAUTHORIZED
        await self._store.transition(
            task.id, TaskState.COMPLETED, reason=reason, error=None if reply else "decision ignored"
        )

    async def _queue_message(self, task: TaskRecord, message: InboundMessage) -> None:
        conversation = await self._conversation_for(message)
        ahead = len(self._queues[conversation.id])
        # The queue's head is the task in progress (running or waiting for a global slot).
        waiting = max(0, ahead - 1)
        if ahead and waiting >= self._max_pending:
            text = (
                f"This conversation already has {waiting} messages waiting; this one was "
                "not queued. Send it again when the agent has caught up, or /stop."
            )
            await self._store.transition(
                task.id, TaskState.PENDING, conversation_id=conversation.id, parsed=message
            )
            await self._store.transition(
                task.id, TaskState.COMPLETED, reason=CompletionReason.REJECTED, error=text
            )
            await self._adapters[message.channel].send_rejection(message.channel_context, text)
            return
        await self._store.transition(
            task.id, TaskState.PENDING, conversation_id=conversation.id, parsed=message
        )
        ack = f"Queued behind {ahead} task(s)." if ahead else "Working on it…"
        await self._adapters[message.channel].send_acknowledgement(
            message.channel_context, task.id, ack
        )
        self._enqueue(conversation.id, task.id)

    async def _conversation_for(self, message: InboundMessage) -> ConversationRecord:
        existing = await self._store.active_conversation(message.channel, message.conversation_key)
        if existing is not None:
            return existing
        return await self._store.create_conversation(
            message.channel, message.conversation_key, None
        )

    async def start_new_conversation(self, channel: str, key: str) -> ConversationRecord:
        """Retire the active conversation of (channel, key); the next message starts afresh.
        The model chosen with /model carries over."""
        previous = await self._store.active_conversation(channel, key)
        model = previous.next_model if previous else None
        created = await self._store.create_conversation(channel, key, None)
        if model:
            created = await self._store.update_conversation(created.id, next_model=model)
        return created

    # -- execution ---------------------------------------------------------------------

    def _enqueue(self, conversation_id: str, task_id: str) -> None:
        self._queues[conversation_id].append(task_id)
        if conversation_id not in self._drainers:
            self._drainers[conversation_id] = self._spawn(self._drain(conversation_id))

    async def _drain(self, conversation_id: str) -> None:
        """Run the conversation's queue in order. No await between the emptiness check
        and leaving, so a message enqueued meanwhile always finds a drainer."""
        queue = self._queues[conversation_id]
        try:
            while queue:
                task_id = queue[0]
                async with self._slots:
                    await self._execute(conversation_id, task_id)
                queue.popleft()
        finally:
            del self._drainers[conversation_id]

    async def _execute(self, conversation_id: str, task_id: str) -> None:
        task = await self._store.transition(task_id, TaskState.EXECUTING)
        message = task.parsed
        assert message is not None
        adapter = self._adapters[task.channel]
        conversation = await self._store.get_conversation(conversation_id)
        reporter = ProgressReporter(
            task_id,
            lambda progress: adapter.send_progress(message.channel_context, progress),
            adapter.capabilities.progress_interval_s,
        )
        job = asyncio.create_task(
            self._executor.execute(task_id, conversation, message, adapter, reporter.on_event)
        )
        running = RunningTask(task_id, message.body, job)
        running.progress = reporter
        self._running[conversation_id] = running
        try:
            result = await asyncio.shield(job)
        except asyncio.CancelledError:
            if not (running.stop_requested and job.cancelled()):
                job.cancel()
                raise  # daemon shutting down: the task stays EXECUTING and is re-run later
            result = TaskResult(
                Reply(text="Stopped. The task was cancelled with /stop.", stopped=True),
                CompletionReason.CANCELLED,
            )
        except SandboxUnavailable as exc:
            log.warning("task %s: the sandbox could not run it: %s", task_id, exc)
            result = TaskResult(
                Reply(text=f"The sandbox could not run this task: {exc}", is_error=True),
                CompletionReason.INTERNAL_ERROR,
            )
        except Exception as exc:
            log.exception("task %s failed", task_id)
            result = TaskResult(
                Reply(text=f"Internal error: {exc}", is_error=True), CompletionReason.INTERNAL_ERROR
            )
        finally:
            await reporter.close()
            self._running.pop(conversation_id, None)
        await self._replies.store_and_send(task_id, message, result.reply, result.reason)
