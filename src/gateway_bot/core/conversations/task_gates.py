"""What a task waits for around its run, and how its progress reaches the person: a
concurrency slot, and its acknowledgement (``Scheduler``)."""

from __future__ import annotations

import asyncio

from gateway_bot.core.channel import ChannelAdapter, ProgressDisplay
from gateway_bot.core.conversations.progress import ProgressReporter
from gateway_bot.core.fault_points import reached
from gateway_bot.domain.messages import InboundMessage, Progress

ACK_WAIT_S = 10.0
"""How long what a task shows the person waits for its acknowledgement, at most."""


class Slot:
    """One of ``max_concurrent_tasks``: taken before a task starts, given back once its
    agent is done (not after its delivery), exactly once."""

    def __init__(self, slots: asyncio.Semaphore) -> None:
        self._slots = slots
        self._held = False

    async def take(self) -> None:
        await self._slots.acquire()
        self._held = True

    def give_back(self) -> None:
        if self._held:
            self._held = False
            self._slots.release()


def reporter_for(
    task_id: str, adapter: ChannelAdapter, message: InboundMessage, acknowledged: Acknowledged
) -> ProgressReporter:
    """The task's progress: shown live where the channel has a display (an edit of the
    acknowledgement, so once that is out), else only kept (for /status)."""
    if not isinstance(adapter, ProgressDisplay):
        return ProgressReporter(task_id, None, 0.0)
    display, context = adapter, message.channel_context

    async def send(progress: Progress) -> None:
        await acknowledged.out()
        await display.send_progress(context, progress)

    return ProgressReporter(task_id, send, display.progress_interval_s)


class Acknowledged:
    """A task's acknowledgement on its way (None: the channel shows none): what the task
    shows the person comes after it, at most ``ACK_WAIT_S`` after the task was taken up
    (its outcome ignored: a notice may be lost)."""

    def __init__(self, sending: asyncio.Task[None] | None) -> None:
        self._sending = sending
        self._deadline = asyncio.get_running_loop().time() + ACK_WAIT_S
        if sending is not None:
            sending.add_done_callback(lambda _: reached("acknowledged"))

    async def out(self) -> None:
        if self._sending is None or self._sending.done():
            return
        remaining = self._deadline - asyncio.get_running_loop().time()
        if remaining > 0:
            await asyncio.wait([self._sending], timeout=remaining)
