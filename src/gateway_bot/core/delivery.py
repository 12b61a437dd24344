"""Replies leave here: stored first, sent (retried), marked delivered, task completed.

One place owns that order, because the exactly-once guarantee depends on it: a reply is
in the store before any channel sees it, and a task completes only after its reply went out.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway_bot.core.channel import ChannelAdapter
from gateway_bot.core.lifecycle import CompletionReason, TaskState
from gateway_bot.core.messages import InboundMessage, Reply
from gateway_bot.core.retries import call_channel
from gateway_bot.state.records import TaskRecord
from gateway_bot.state.store import Store


class ReplyDelivery:
    def __init__(self, store: Store, adapters: Mapping[str, ChannelAdapter]) -> None:
        self._store = store
        self._adapters = adapters

    async def finish(self, task: TaskRecord) -> None:
        """Complete a task a crash caught after its reply was stored."""
        assert task.parsed is not None
        assert task.reply is not None
        reason = (
            CompletionReason.EXECUTION_FAILED if task.reply.is_error else CompletionReason.SUCCESS
        )
        if task.reply_delivered:
            await self._store.transition(task.id, TaskState.COMPLETED, reason=reason)
            return
        await self._send(task.id, task.parsed, task.reply, reason)

    async def store_and_send(
        self, task_id: str, message: InboundMessage, reply: Reply, reason: CompletionReason
    ) -> None:
        """The end of an executed task."""
        await self._store.record_reply(task_id, reply)
        if reply.usage is not None:
            await self._store.record_usage(task_id, reply.usage)
        await self._send(task_id, message, reply, reason)

    async def _send(
        self, task_id: str, message: InboundMessage, reply: Reply, reason: CompletionReason
    ) -> None:
        adapter = self._adapters[message.channel]
        await call_channel(
            f"{message.channel}: sending the reply of task {task_id}",
            lambda: adapter.send_reply(message.channel_context, task_id, reply),
        )
        await self._store.mark_reply_delivered(task_id)
        await self._store.transition(
            task_id,
            TaskState.COMPLETED,
            reason=reason,
            error=reply.text if reply.is_error else None,
        )

    async def answer_now(
        self, task: TaskRecord, message: InboundMessage, text: str, reason: CompletionReason
    ) -> None:
        """Reply without queueing (commands, refusals): store, send, complete."""
        await self._store.transition(task.id, TaskState.EXECUTING, parsed=message)
        reply = Reply(text=text, is_error=reason is not CompletionReason.SUCCESS)
        await self.store_and_send(task.id, message, reply, reason)
