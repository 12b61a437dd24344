"""Messages committed but not yet known to be on disk, held back from their lanes and
from every notice until they are (decision 0098: group commit).

A message's flush can fail (a disk error; on PostgreSQL a connection lost during the
synchronous commit), or its ``submit`` can be cancelled while it waits. The hold then stays
(it used to be dropped with the failed flush, and the task was acknowledged and run with no
flush behind it), and the task waits for a later flush that succeeds. If that one fails
too, ``NotOnDisk`` (transient) sends it back to the intake's retries and the sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable


class NotOnDisk(Exception):
    """The message's own flush and a later one failed: nobody may hear of it yet."""

    transient = True  # ``retries.is_transient``: taken in again by the intake or the sweep


class DiskHolds:
    def __init__(self, flush: Callable[[], Awaitable[None]]) -> None:
        """``flush``: returns once every commit made so far is on disk."""
        self._flush = flush
        self._holds: dict[str, asyncio.Future[None]] = {}

    def hold(self, task_id: str, on_disk: asyncio.Future[None]) -> None:
        """``on_disk`` resolves when the task's message is on disk, or fails."""
        if on_disk.done() and not on_disk.cancelled() and on_disk.exception() is None:
            return
        self._holds[task_id] = on_disk

        def settled(done: asyncio.Future[None]) -> None:
            if not done.cancelled() and done.exception() is None:
                self._holds.pop(task_id, None)  # kept when it failed: ``on_disk`` flushes

        on_disk.add_done_callback(settled)

    def held(self, task_id: str) -> bool:
        return task_id in self._holds

    async def on_disk(self, task_id: str) -> None:
        """Return once the task's message is on disk (at once when it is not held)."""
        held = self._holds.get(task_id)
        if held is None:
            return
        with contextlib.suppress(Exception):
            await held
            return
        try:
            await self._flush()  # began after the failed one: it covers the message
        except Exception as exc:
            problem = f"task {task_id}: its message could not be put on disk ({exc!r})"
            raise NotOnDisk(problem) from exc
        self._holds.pop(task_id, None)
