"""The bot's own room sends in flight, so the sync can wait for the answers a batch causes.

Why (decisions 0113, 0133): a long poll parked at the homeserver is woken by every event in
the bot's rooms, its own included. With the next /sync already waiting while an acknowledgement went
out, the homeserver answered the bot's sync (and the bot handled that echo) at the very
moment it woke the person's clients to show them the acknowledgement, and they saw it later:
measured on a 2-core host, the acknowledgement reached the person's other device 15-50 ms
later than a minimal bot's, more than the whole store commit. Polling again only once the
sends were out did not help (the echo then came back at once, still in that moment); waiting
about 0.1 s more, or 0.25 s, did (the same as the minimal bot, or better). So after a batch
that handed messages on, the listener waits until their answers are sent (at most
``ANSWERS_WAIT_S``), then, when one of them acknowledged a task, ``ECHO_GRACE_S``, before it
polls again. Nothing is missed meanwhile: the next poll starts from the batch's token, so a
message sent in that window is in its answer at once; it is only picked up that much later.
Not after a command's answer (decision 0133): the person's next message is what comes next
there (after ``/new``, the first of the new conversation), where after an acknowledgement
it is the agent's work, which no poll holds up.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass


@dataclass(frozen=True)
class SendsMark:
    """How many sends had started and finished at a point: what ``settled_since`` compares
    with."""

    started: int
    finished: int
    acknowledged: int


class SendsInFlight:
    """Counts room sends (started, finished) and lets a waiter see them settle."""

    def __init__(self) -> None:
        self._running = 0
        self._started = 0
        self._finished = 0
        self._acknowledged = 0
        self._changed = asyncio.Event()

    def mark(self) -> SendsMark:
        return SendsMark(self._started, self._finished, self._acknowledged)

    def acknowledged_since(self, mark: SendsMark) -> bool:
        """An acknowledgement of a task went out (or was tried) after ``mark``."""
        return self._acknowledged > mark.acknowledged

    @contextlib.asynccontextmanager
    async def sending(self, *, acknowledgement: bool = False) -> AsyncIterator[None]:
        """Around one send (success or failure: either way it is no longer in flight).
        ``acknowledgement``: a task's acknowledgement, which the listener's grace is for."""
        self._running += 1
        self._started += 1
        self._acknowledged += acknowledgement
        self._wake()
        try:
            yield
        finally:
            self._running -= 1
            self._finished += 1
            self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def settled_since(self, mark: SendsMark, start_within_s: float, cap_s: float) -> bool:
        """Wait until a send finished after ``mark`` and none is running; at most
        ``start_within_s`` when no send starts at all (a batch of chatter in a busy room
        gets no answer: its next message must not wait for one), and at most ``cap_s`` in
        all (one still being decided). True when it settled, False when it gave up."""
        loop = asyncio.get_running_loop()
        begun = loop.time()
        while not (self._finished > mark.finished and self._running == 0):
            now = loop.time()
            limit = cap_s if self._started > mark.started else min(start_within_s, cap_s)
            remaining = begun + limit - now
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)
        return True
