"""Turns agent events into progress updates, at most one per channel interval.

A burst of tool calls becomes one update with all of them; the last step always gets out
(a delayed flush), so the user never sees a stale display while the agent thinks. The
reporter is where a task's steps live: every update carries them, and ``finished`` makes
the closing update the reply's delivery sends, so no channel keeps a copy. Without a
display (``send`` None) it only collects the steps, for /status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from gateway_bot.agents.base import AgentEvent, NoticeEvent, ToolUseEvent
from gateway_bot.domain.messages import Progress, Reply

log = logging.getLogger(__name__)

SendProgress = Callable[[Progress], Awaitable[None]]
MAX_STEPS = 200
MAX_STEP_CHARS = 300
"""The display keeps the newest steps, each bounded: an agent emitting millions of tool
calls must not grow the daemon's memory or every progress update."""


class ProgressReporter:
    def __init__(self, task_id: str, send: SendProgress | None, interval_s: float) -> None:
        self._task_id = task_id
        self._send = send
        self._interval = interval_s
        self._started = time.monotonic()
        self._steps: list[str] = []
        self._unsent = 0
        """Steps that arrived since the last update (what an appending display prints)."""
        self._last_sent = float("-inf")
        self._flush: asyncio.Task[None] | None = None

    @property
    def steps(self) -> tuple[str, ...]:
        return tuple(self._steps)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self._started

    def finished(self, reply: Reply) -> Progress:
        """The closing update: the finished steps and the reply that went out (with the
        steps no update showed yet, for a display that only appends)."""
        new_steps = min(self._unsent, len(self._steps))
        return Progress(self._task_id, self.steps, self.elapsed_s, new_steps, outcome=reply)

    async def on_event(self, event: AgentEvent) -> None:
        if isinstance(event, NoticeEvent):
            step = event.text
        elif isinstance(event, ToolUseEvent):
            step = event.summary
        else:
            return
        self._steps.append(step[:MAX_STEP_CHARS])
        self._unsent += 1
        if len(self._steps) > MAX_STEPS:  # the agent controls how many it reports
            self._steps[: len(self._steps) - MAX_STEPS] = []
        if self._send is None:
            return
        wait = self._last_sent + self._interval - time.monotonic()
        if wait <= 0:
            await self._send_now()
        elif self._flush is None:
            self._flush = asyncio.create_task(self._send_later(wait))

    async def _send_later(self, delay: float) -> None:
        await asyncio.sleep(delay)
        self._flush = None
        await self._send_now()

    async def _send_now(self) -> None:
        assert self._send is not None
        self._last_sent = time.monotonic()
        new_steps, self._unsent = min(self._unsent, len(self._steps)), 0
        try:
            await self._send(Progress(self._task_id, self.steps, self.elapsed_s, new_steps))
        except Exception:
            log.warning("progress update for task %s failed", self._task_id, exc_info=True)

    async def close(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flush
            self._flush = None
