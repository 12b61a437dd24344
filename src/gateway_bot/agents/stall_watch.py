"""Stuck detection: an agent run that says nothing for too long is stopped.

A run can hang without ending: a model API that stops streaming half-way, a tool that never
returns, a CLI waiting for an answer nobody gives. The per-task ceiling (``timeout_seconds``,
30 minutes by default) does end it, but a chat user should not wait that long to learn it.
So every run is watched through its typed events, whatever the backend: once it has said
anything (its start-up event: the sandbox's preparation, an image build included, is not
watched), a silence longer than ``stall_s`` stops it. A tool call that declares a longer
time limit of its own (Claude Code's Bash ``timeout``) may be silent that much longer while
it runs. The user is told what the agent did last; the conversation's session is left as it
was, so the next message resumes it.

Silence means "no event": Claude Code's stream-json gives one event per finished model
message, so a single response the model writes for longer than ``stall_s`` counts too.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

from gateway_bot.agents.base import AgentEvent, OnEvent, ToolResultEvent, ToolUseEvent

T = TypeVar("T")


@dataclass(frozen=True)
class Stalled:
    """A run stopped by the watch: how long it had been silent, and its last step."""

    silent_s: float
    last_step: str | None
    """The last tool call's one-line summary (``Bash: make test``), None before any."""

    def explain(self) -> str:
        after = (
            f"after its last step ({self.last_step})"
            if self.last_step
            else "before it took any step"
        )
        return (
            f"The agent stopped responding: nothing came from it for {_duration(self.silent_s)} "
            f"{after}, so it was stopped. Send another message to continue; the conversation "
            "keeps its history."
        )


class StallWatch:
    """One run's watch: pass ``wrap(on_event)`` to the runner and the run to ``run_within``."""

    def __init__(self, stall_s: float) -> None:
        self._stall_s = stall_s
        self._last_event: float | None = None
        self._tool_limits: list[float] = []
        """Declared time limits of the tool calls still running, oldest first (0: none)."""
        self._last_step: str | None = None
        self._heard = asyncio.Event()
        self._holds = 0
        """Questions to a person in progress (action approvals): no silence counts then."""

    def hold(self) -> None:
        """The run waits for a person, not for the agent: silence does not count."""
        self._holds += 1

    def release(self) -> None:
        """The person answered: silence counts again, from now."""
        self._holds = max(0, self._holds - 1)
        self._last_event = time.monotonic()

    def wrap(self, on_event: OnEvent) -> OnEvent:
        async def watched(event: AgentEvent) -> None:
            self._note(event)
            await on_event(event)

        return watched

    def _note(self, event: AgentEvent) -> None:
        self._last_event = time.monotonic()
        if isinstance(event, ToolUseEvent):
            self._last_step = event.summary
            self._tool_limits.append(event.timeout_s or 0.0)
        elif isinstance(event, ToolResultEvent) and self._tool_limits:
            self._tool_limits.pop(0)
        self._heard.set()

    def _allowed_silence(self) -> float:
        """``stall_s``, plus the longest declared limit of a tool call still running."""
        return self._stall_s + max(self._tool_limits, default=0.0)

    async def _watch(self) -> Stalled:
        await self._heard.wait()
        while True:
            assert self._last_event is not None
            if self._holds:
                self._last_event = time.monotonic()
            silent = time.monotonic() - self._last_event
            allowed = self._allowed_silence()
            if not math.isfinite(allowed):  # never from a parser, but the loop must sleep
                allowed = self._stall_s
            if silent >= allowed:
                return Stalled(silent, self._last_step)
            await asyncio.sleep(allowed - silent)

    async def run_within(self, work: Awaitable[T]) -> T | Stalled:
        """Run ``work`` (an agent run given ``wrap``'s callback) under the watch. Stalled,
        ``work`` is cancelled (cancelling a run kills its process) and the watch's finding
        returned. Cancelling this cancels both."""
        job = asyncio.ensure_future(work)
        watcher = asyncio.create_task(self._watch())
        try:
            await asyncio.wait({job, watcher}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            job.cancel()
            watcher.cancel()
            await asyncio.wait({job, watcher})
            raise
        if job.done():
            watcher.cancel()
            await asyncio.wait({watcher})
            return job.result()
        job.cancel()
        await asyncio.wait({job})  # the run's own clean-up (kill, wait) finishes here
        if not job.cancelled() and job.exception() is None:
            return job.result()  # it finished while being stopped: its answer stands
        return watcher.result()


def _duration(seconds: float) -> str:
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"
