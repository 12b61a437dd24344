"""Replies leave here: stored first, sent (retried), marked delivered, task completed.

One place owns that order, because the exactly-once guarantee depends on it: a reply is
in the store before any channel sees it, and a task completes only after its reply went out.
A reply the channel would not take after the retry policy's attempts parks its task in
UNDELIVERED with the reason: the conversation moves on, and ``redeliver`` (the service's
sweep, every start) sends the stored reply again. It is never recomputed.

Once the reply is out, a channel with a ``ProgressDisplay`` gets the closing update
(``Progress.outcome``) with the finished steps, one attempt: a display left on "Working…"
is cosmetic, and must not hold up the task's completion.

``after_delivery`` (``conversation_mail.ConversationMailer.copy_to_chat``) runs once the
reply is out and before the task completes, also when a restart finds a delivered reply
whose task did not complete: it must be idempotent per task and must not raise.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from gateway_bot.core.channel import ChannelAdapter, ProgressDisplay
from gateway_bot.core.fault_points import reached
from gateway_bot.core.jobs import Jobs
from gateway_bot.core.retries import DEFAULT_POLICY, RetryPolicy, call_channel
from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from gateway_bot.domain.messages import InboundMessage, Progress, Reply
from gateway_bot.domain.records import TaskRecord
from gateway_bot.state.store import Store

log = logging.getLogger(__name__)

AfterDelivery = Callable[[str, InboundMessage, Reply], Awaitable[None]]


class ReplyDelivery:
    def __init__(
        self,
        store: Store,
        adapters: Mapping[str, ChannelAdapter],
        jobs: Jobs,
        policy: RetryPolicy = DEFAULT_POLICY,
        after_delivery: AfterDelivery | None = None,
    ) -> None:
        self._store = store
        self._adapters = adapters
        self._jobs = jobs
        self._policy = policy
        self._after_delivery = after_delivery
        self._sending: set[str] = set()
        """Parked tasks being sent again now: the next sweep leaves them alone."""

    async def finish(self, task: TaskRecord) -> None:
        """Deliver a reply stored earlier (a crash, or a channel that would not take it)."""
        assert task.parsed is not None
        assert task.reply is not None
        reason = _reason_of(task.reply)
        if task.reply_delivered:
            if self._after_delivery is not None:
                await self._after_delivery(task.id, task.parsed, task.reply)
            await self._store.transition(task.id, TaskState.COMPLETED, reason=reason)
            return
        # The daemon that ran it took the steps with it; a display this task never had
        # (a command's answer) is left alone by its channel.
        duration = task.reply.usage.duration_s if task.reply.usage else 0.0
        closing = Progress(task.id, (), duration, outcome=task.reply)
        await self._send(task.id, task.parsed, task.reply, reason, closing)

    async def redeliver(self) -> None:
        """Send every parked reply again, each in its own job."""
        for task in await self._store.tasks_in_states([TaskState.UNDELIVERED]):
            if task.id not in self._sending and not self._jobs.closed:
                self._sending.add(task.id)
                self._jobs.spawn(self._redeliver(task), name=f"redeliver-{task.id}")

    async def _redeliver(self, task: TaskRecord) -> None:
        try:
            await self.finish(task)
        finally:
            self._sending.discard(task.id)

    async def store_and_send(
        self,
        task_id: str,
        message: InboundMessage,
        reply: Reply,
        reason: CompletionReason,
        closing: Progress | None = None,
        record: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        """The end of an executed task. Returns once the task is completed or parked.
        ``closing`` (the finished steps) closes the progress display once the reply is out.
        ``record`` (replicas, ``core/replicas/duties.py``) stores the reply in place of the store's
        ``record_reply`` and says False when this replica's claim on the conversation was
        taken over: the reply is then neither stored nor sent (the new holder runs it)."""
        if record is None:
            await self._store.record_reply(task_id, reply)
        elif not await record():
            log.warning(
                "task %s: this replica lost its conversation's claim; its reply is refused",
                task_id,
            )
            return
        if reply.usage is not None:
            await self._store.record_usage(task_id, reply.usage)
        reached("reply_stored")
        await self._send(task_id, message, reply, reason, closing)

    async def answer_now(
        self,
        task: TaskRecord,
        message: InboundMessage,
        text: str,
        reason: CompletionReason,
        files: tuple[str, ...] = (),
    ) -> None:
        """Reply without queueing (commands, refusals). The reply is stored here, where the
        caller may hold the intake lock, and sent by a job of its own: a channel that is slow
        or failing never holds up the messages behind this one. ``files`` are host paths in
        the task's sent/ directory (a long /diff)."""
        await self._store.transition(task.id, TaskState.EXECUTING, parsed=message)
        reply = Reply(text=text, files=files, is_error=reason is not CompletionReason.SUCCESS)
        await self._store.record_reply(task.id, reply)
        self._jobs.spawn(self._send(task.id, message, reply, reason), name=f"answer-{task.id}")

    async def _send(
        self,
        task_id: str,
        message: InboundMessage,
        reply: Reply,
        reason: CompletionReason,
        closing: Progress | None = None,
    ) -> None:
        adapter = self._adapters[message.channel]
        reached("reply_sending")
        try:
            await call_channel(
                f"{message.channel}: sending the reply of task {task_id}",
                lambda: adapter.send_reply(message.channel_context, task_id, reply),
                self._policy,
            )
        except Exception as exc:
            await self._park(task_id, exc)
            return
        reached("reply_sent")
        await self._store.mark_reply_delivered(task_id)
        reached("reply_delivered")
        if self._after_delivery is not None:
            await self._after_delivery(task_id, message, reply)
        if closing is not None and isinstance(adapter, ProgressDisplay):
            try:
                await adapter.send_progress(message.channel_context, closing)
            except Exception as exc:
                log.warning("task %s: the progress display was not closed (%r)", task_id, exc)
        await self._store.transition(
            task_id,
            TaskState.COMPLETED,
            reason=reason,
            error=reply.text if reply.is_error else None,
        )

    async def _park(self, task_id: str, error: Exception) -> None:
        why = f"{type(error).__name__}: {error}"
        log.warning(
            "task %s: the reply could not be sent (%s); it will be sent again", task_id, why
        )
        await self._store.record_delivery_failure(task_id, why)
        if (await self._store.get_task(task_id)).state is TaskState.EXECUTING:
            await self._store.transition(task_id, TaskState.UNDELIVERED)


def _reason_of(reply: Reply) -> CompletionReason:
    """A stored reply's completion reason, as far as the reply itself tells it."""
    if reply.stopped:
        return CompletionReason.CANCELLED
    return CompletionReason.EXECUTION_FAILED if reply.is_error else CompletionReason.SUCCESS
