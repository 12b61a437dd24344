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
        self._timer: asyncio.TimerHandle | None = None
        self.flushes = 0
        """Flushes done (the benchmarks report flushes per task)."""

    @property
    def commits(self) -> int:
        """Commits noted so far."""
        return self._commits

    def committed(self) -> int:
        """Note a commit the engine has just made; returns its number (for ``wait``)."""
        self._commits += 1
        return self._commits

    async def wait(self, commit: int | None = None) -> None:
        """Return once commit number ``commit`` (default: every commit noted so far) is on
        disk: at once if a flush already covered it, with the running flush if that one
        started after it, else with the next. A cancelled waiter leaves the flush running
        for the others."""
        await self.begun(commit)

    def begun(self, commit: int | None = None) -> asyncio.Future[None]:
        """``wait`` as a future, its flush started before this returns (not at the caller's
        next await): a message's flush then runs beside what the caller starts next, its
        routing (issue 33). The future is the caller's own: cancelling it leaves the flush
        running for the others."""
        wanted = self._commits if commit is None else commit
        if wanted <= self._on_disk:
            done = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        if self._running is not None and wanted <= self._running[0]:
            return asyncio.shield(self._running[1])
        return asyncio.shield(self._request())

    def made(self, commit: int, synced: asyncio.Future[None]) -> asyncio.Future[None]:
        """A flush the engine made itself right after commit number ``commit`` (SQLite:
        on the connection's thread, ``synced``): once it is done, every commit up to that
        one is on disk. Returns the caller's own future of it, as ``begun`` does."""
        own: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        synced.add_done_callback(lambda done: self._settle(commit, own, done))
        return own

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
        while self._running is not None:  # (a flush that ends starts the next one)
            await asyncio.wait([self._running[1]])

    def _relaxed(self) -> None:
        self._timer = None
        if self._commits > self._on_disk:
            self._request().add_done_callback(_retrieve)

    def _request(self) -> asyncio.Future[None]:
        """The future of the flush that covers every commit so far: the next one, or one
        begun here when none runs (the disk starts before the loop turns)."""
        if self._next is not None:
            return self._next
        batch = self._next = asyncio.get_running_loop().create_future()
        if self._running is None:
            self._begin()
        return batch

    def _begin(self) -> None:
        """Start the flush the next commits joined; they are running from now on. Its end
        is a callback, not a task's next step: waiters hear of it a turn of the loop
        sooner."""
        batch, self._next = self._next, None
        assert batch is not None
        covers = self._commits
        self._running = (covers, batch)
        if self._timer is not None:  # this flush covers the relaxed commits too
            self._timer.cancel()
            self._timer = None
        pending: asyncio.Future[None]
        try:
            pending = asyncio.ensure_future(self._flush())
        except Exception as exc:  # (it could not even start: its waiters hear why)
            pending = asyncio.get_running_loop().create_future()
            pending.set_exception(exc)
        pending.add_done_callback(lambda done: self._ended(covers, batch, done))

    def _ended(self, covers: int, batch: asyncio.Future[None], done: asyncio.Future[None]) -> None:
        self._running = None
        self._settle(covers, batch, done)
        if self._next is not None:
            self._begin()

    def _settle(
        self, covers: int, waiters: asyncio.Future[None], done: asyncio.Future[None]
    ) -> None:
        """A flush (``done``) that covers commits up to ``covers`` ended: tell ``waiters``
        (unless they were cancelled meanwhile)."""
        if not done.cancelled() and done.exception() is None:
            self._on_disk = max(self._on_disk, covers)
            self.flushes += 1
        if waiters.done():
            return
        if done.cancelled():  # the loop is closing under it
            waiters.set_exception(RuntimeError("the state database was closed"))
            waiters.add_done_callback(_retrieve)
        elif done.exception() is not None:
            waiters.set_exception(done.exception() or RuntimeError())
        else:
            waiters.set_result(None)


def _retrieve(future: asyncio.Future[None]) -> None:
    """A flush nobody waits for: its failure is logged (the next one tries again)."""
    if not future.cancelled() and future.exception() is not None:
        log.warning("state: a background flush failed: %r", future.exception())
