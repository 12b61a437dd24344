"""The bot's own room sends in flight, so the sync can wait for the answers a batch causes.

Why (issue 19): a long poll parked at the homeserver is woken by every event in the bot's
rooms, its own included. With the next /sync already waiting while an acknowledgement went
out, the homeserver answered the bot's sync (and the bot handled that echo) at the very
moment it woke the person's clients to show them the acknowledgement, and they saw it later:
measured on a 2-core host, the acknowledgement reached the person's other device 15-50 ms
later than a minimal bot's, more than the whole store commit. Polling again only once the
sends were out did not help (the echo then came back at once, still in that moment); waiting
about 0.1 s more, or 0.25 s, did (the same as the minimal bot, or better). So after a batch
that handed messages on, the listener waits until their answers are sent (at most
``ANSWERS_WAIT_S``), then ``ECHO_GRACE_S``, before it polls again. Nothing is missed
meanwhile: the next poll starts from the batch's token, so a message sent in that window is
in its answer at once; it is only picked up that much later.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class SendsInFlight:
    """Counts room sends (started, finished) and lets a waiter see them settle."""

    def __init__(self) -> None:
        self._running = 0
        self._finished = 0
        self._changed = asyncio.Event()

    def mark(self) -> int:
        """How many sends have finished so far: what ``settled_since`` compares with."""
        return self._finished

    @contextlib.asynccontextmanager
    async def sending(self) -> AsyncIterator[None]:
        """Around one send (success or failure: either way it is no longer in flight)."""
        self._running += 1
        try:
            yield
        finally:
            self._running -= 1
            self._finished += 1
            changed, self._changed = self._changed, asyncio.Event()
            changed.set()

    async def settled_since(self, mark: int, cap_s: float) -> bool:
        """Wait until a send finished after ``mark`` and none is running, at most
        ``cap_s`` (a batch whose messages get no answer, or one still being decided, must
        not hold up the next poll for long). True when it settled, False at the cap."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + cap_s
        while not (self._finished > mark and self._running == 0):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)
        return True
