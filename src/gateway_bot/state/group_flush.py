"""Group commit: commits go to the engine at once, and concurrent writers share one flush.

A commit that must survive a power cut used to flush (fsync) on its own, on the one SQLite
connection, while every other writer waited for the lock (decision 0098: 8 flushes per task,
~4 ms each, in series). Now every commit is made without waiting for the disk (it
survives the process's death at once: the engine has it), is numbered (``committed``),
and ``wait`` returns once a flush that started after that commit is done. A writer whose
commit came after the running flush began joins the next one, so N concurrent writers
cost about two flushes instead of N.

Why a later flush covers everything before it: the engine's log is written in order
(SQLite's WAL, PostgreSQL's WAL) and recovery keeps a prefix of it, so once a commit is on
disk, every commit made before it is too.

A commit that needs no flush of its own (``soon``: a state that recovery rebuilds, or a
record written after its effect) is flushed by the next ``wait`` of anyone, or at the
latest ``RELAXED_FLUSH_S`` later by a flush of its own in the background: the window a
power cut can take it in stays small, and nobody waits for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

RELAXED_FLUSH_S = 0.05
"""How long a relaxed commit may wait for a flush that someone else asked for."""


class GroupFlush:
    def __init__(self, flush: Callable[[], Awaitable[None]]) -> None:
        """``flush``: puts everything committed so far on disk (one fsync, one synchronous
        commit), whatever else runs meanwhile."""
        self._flush = flush
        self._commits = 0
        """Commits noted so far (``committed``), in the order the engine made them."""
        self._on_disk = 0
        """Commits up to this number are on disk."""
        self._running: tuple[int, asyncio.Future[None]] | None = None
        """The flush in progress: the commits it covers, and its waiters' future."""
        self._next: asyncio.Future[None] | None = None
        """The flush later commits join: it starts when the running one ends."""
        self._runner: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.flushes = 0
        """Flushes done (the benchmarks report flushes per task)."""

    def committed(self) -> int:
        """Note a commit the engine has just made; returns its number (for ``wait``)."""
        self._commits += 1
        return self._commits

    async def wait(self, commit: int | None = None) -> None:
        """Return once commit number ``commit`` (default: every commit noted so far) is on
        disk: at once if a flush already covered it, with the running flush if that one
        started after it, else with the next. A cancelled waiter leaves the flush running
        for the others."""
        wanted = self._commits if commit is None else commit
        if wanted <= self._on_disk:
            return
        if self._running is not None and wanted <= self._running[0]:
            await asyncio.shield(self._running[1])
            return
        await asyncio.shield(self._request())

    def soon(self) -> None:
        """Have what was committed flushed by ``RELAXED_FLUSH_S`` at the latest, without
        waiting for it (a flush someone else asks for meanwhile covers it)."""
        if self._timer is None and self._next is None:
            self._timer = asyncio.get_running_loop().call_later(RELAXED_FLUSH_S, self._relaxed)

    async def close(self) -> None:
        """Flush what is pending (a relaxed commit's timer included) and stop."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._request()
        while self._runner is not None:
            await asyncio.shield(self._runner)

    def _relaxed(self) -> None:
        self._timer = None
        if self._commits > self._on_disk:
            self._request().add_done_callback(_retrieve)

    def _request(self) -> asyncio.Future[None]:
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
            if self._runner is None:
                self._runner = asyncio.create_task(self._run(), name="group-flush")
        return self._next

    async def _run(self) -> None:
        try:
            while self._next is not None:
                batch, self._next = self._next, None
                covers = self._commits
                self._running = (covers, batch)
                if self._timer is not None:  # this flush covers the relaxed commits too
                    self._timer.cancel()
                    self._timer = None
                try:
                    await self._flush()
                except asyncio.CancelledError:
                    batch.set_exception(RuntimeError("the state database was closed"))
                    batch.add_done_callback(_retrieve)
                    raise
                except Exception as exc:
                    batch.set_exception(exc)
                else:
                    self._on_disk = max(self._on_disk, covers)
                    self.flushes += 1
                    batch.set_result(None)
                finally:
                    self._running = None
        finally:
            self._runner = None
            if self._next is not None and not self._next.done():  # cancelled mid-way
                self._next.set_exception(RuntimeError("the state database was closed"))
                self._next.add_done_callback(_retrieve)
                self._next = None


def _retrieve(future: asyncio.Future[None]) -> None:
    """A flush nobody waits for: its failure is logged (the next one tries again)."""
    if not future.cancelled() and future.exception() is not None:
        log.warning("state: a background flush failed: %r", future.exception())
