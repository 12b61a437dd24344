"""A task whose sandbox host does not answer (decision 0088): it is kept (PENDING, first in its
lane, re-run after a restart too) and never run elsewhere; its sender is told once; between
tries a pause stands in for the run, so /status shows why it waits and /stop can end it.

Apart from the scheduler (``core/conversations/queue.py`` had grown past 400 lines), which runs a
task and hands this module the ones whose host was unreachable.
"""

from __future__ import annotations

import asyncio
import logging

from gateway_bot.core.channel import ChannelAdapter
from gateway_bot.core.conversations.delivery import ReplyDelivery
from gateway_bot.core.conversations.lanes import (
    STOPPED_TEXT,
    ConversationClaims,
    ConversationLane,
    RunningTask,
    fenced_record,
)
from gateway_bot.core.conversations.queue_notices import QueueNotices
from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from gateway_bot.domain.messages import InboundMessage, Reply
from gateway_bot.sandbox.base import HostUnreachable
from gateway_bot.state.store import Store

log = logging.getLogger(__name__)

HOST_RETRY_S = 5.0
"""How often a task whose sandbox host is unreachable tries again."""


class HostWaits:
    def __init__(
        self,
        store: Store,
        replies: ReplyDelivery,
        notices: QueueNotices,
        running: dict[str, RunningTask],
    ) -> None:
        """``running``: the scheduler's running tasks (conversation id -> task), where a
        pause stands in for the run."""
        self._store = store
        self._replies = replies
        self._notices = notices
        self._running = running
        self._told: dict[str, str] = {}
        """Tasks whose sender was told they wait for their host (told once): the host."""

    def forget(self, task_id: str) -> None:
        """The task left its lane."""
        self._told.pop(task_id, None)

    async def wait(
        self, task_id: str, adapter: ChannelAdapter, message: InboundMessage, exc: HostUnreachable
    ) -> None:
        """The conversation's container lives on a host that does not answer: the task is
        kept (PENDING, first in its lane, re-run after a restart too) and its sender told
        once; it is never run elsewhere."""
        await self._store.transition(task_id, TaskState.PENDING)
        log.warning("task %s waits: %s", task_id, exc)
        if task_id in self._told:
            return
        self._told[task_id] = exc.host
        text = (
            f"The agent's host {exc.host} is unreachable; your message is kept and will run "
            "when the host is back (/stop drops it)."
        )
        context = message.channel_context
        self._notices.tell(f"{message.channel}: task {task_id} waits for its host",
                           lambda: adapter.send_rejection(context, text))  # fmt: skip

    async def stopped_during_pause(
        self, lane: ConversationLane, task_id: str, claims: ConversationClaims | None
    ) -> bool:
        """Pause before the next try of a task whose host is down (it stays first in its
        lane, outside the global slots). The pause stands in for the run in /status and
        /stop (the dashboard offers its button for executing tasks only): a stop ends the
        task with the answer a stopped run gets, instead of leaving its sender waiting for
        a host that may never come back."""
        claim = claims.claim_token(lane.conversation_id) if claims is not None else None
        task = await self._store.get_task(task_id)
        message = task.parsed
        assert message is not None
        pause = asyncio.ensure_future(asyncio.sleep(HOST_RETRY_S))
        waiting = RunningTask(task_id, message.body, pause)
        waiting.host_down = self._told.get(task_id, "?")
        lane.running = self._running[lane.conversation_id] = waiting
        try:
            await asyncio.wait([pause])  # a stop cancels the pause, not this wait
        finally:
            pause.cancel()
            lane.running = None
            self._running.pop(lane.conversation_id, None)
        if not waiting.stop_requested:
            return False
        log.info("task %s: stopped while waiting for its host", task_id)
        await self._store.transition(task_id, TaskState.EXECUTING)
        stopped = Reply(text=STOPPED_TEXT, stopped=True)
        await self._replies.store_and_send(
            task_id,
            message,
            stopped,
            CompletionReason.CANCELLED,
            None,
            fenced_record(claims, lane.conversation_id, task_id, stopped, claim),
        )
        return True
