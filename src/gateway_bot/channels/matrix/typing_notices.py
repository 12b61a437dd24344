"""Typing notices while a room's tasks run: shown once a task has run a moment, renewed
before they expire, taken back when the room's last task ends.

Why not at once: the acknowledgement ("Working on it…") already says the task started, and
a typing notice sent right after it made the homeserver wake every parked sync in the room
(the person's clients computing it while they should be showing the acknowledgement), for
tasks that mostly end within a second anyway (decision 0113). A task that runs longer shows
typing after ``SHOW_AFTER_S``; one that ends sooner sends no typing requests at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

SHOW_AFTER_S = 1.0
"""How long a room's task runs before the bot shows itself typing."""
_TICK_S = 0.5
_RENEW_S = 20.0
"""Renewal interval: well within the notice's own timeout (the adapter's 30 s)."""

SetTyping = Callable[[str, bool], Awaitable[None]]


class RoomTyping:
    """Which rooms have tasks running (by task id), and which show typing now."""

    def __init__(self, set_typing: SetTyping) -> None:
        self._set_typing = set_typing
        self._tasks: dict[str, set[str]] = {}
        self._since: dict[str, float] = {}  # room -> when its first running task started
        self._shown: dict[str, float] = {}  # room -> when typing was last sent
        self._sending: set[str] = set()  # rooms whose typing notice is on its way
        self._ticker: asyncio.Task[None] | None = None

    def start(self, room_id: str, task_id: str) -> None:
        """A task in the room runs (again: progress repeats this, harmlessly)."""
        tasks = self._tasks.setdefault(room_id, set())
        if not tasks:
            self._since[room_id] = asyncio.get_running_loop().time()
        tasks.add(task_id)
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.create_task(self._tick(), name="matrix-typing")

    async def stop(self, room_id: str, task_id: str) -> None:
        """The task ended; the room stops typing when it was its last one."""
        tasks = self._tasks.get(room_id)
        if tasks is None:
            return
        tasks.discard(task_id)
        if tasks:
            return
        del self._tasks[room_id]
        self._since.pop(room_id, None)
        # While a notice is on its way, the ticker takes it back once it arrived (two
        # requests in flight could reach the homeserver in either order).
        if self._shown.pop(room_id, None) is not None and room_id not in self._sending:
            await self._set_typing(room_id, False)

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while self._tasks:
            await asyncio.sleep(_TICK_S)
            now = loop.time()
            for room_id in list(self._tasks):
                shown = self._shown.get(room_id)
                if shown is None:
                    due = now - self._since.get(room_id, now) >= SHOW_AFTER_S
                else:
                    due = now - shown >= _RENEW_S
                if not due:
                    continue
                self._shown[room_id] = now
                self._sending.add(room_id)
                try:
                    await self._set_typing(room_id, True)
                finally:
                    self._sending.discard(room_id)
                if room_id not in self._tasks:  # it ended while that was sent
                    self._shown.pop(room_id, None)
                    await self._set_typing(room_id, False)
