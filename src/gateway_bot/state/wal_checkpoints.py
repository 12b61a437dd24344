"""WAL checkpoints beside the work, not inside a message's commit (issue 33).

SQLite copies its WAL back into the database file (a checkpoint) from inside whichever
commit takes the WAL past ``wal_autocheckpoint`` pages, and with ``synchronous=NORMAL``
that commit also syncs the WAL and the database file: 2-5 ms on this machine's disk, one
commit in a few hundred, and the store's one connection (every read and write) waits for
it. Measured, that was most of a Slack acknowledgement's p99.

Here the daemon's connection checkpoints only as a backstop (``BACKSTOP_PAGES``: a
checkpoint that keeps failing, or a reader holding an old snapshot for a long time). A
connection of its own, on its own thread, checkpoints PASSIVE (it never blocks a reader or
the writer; frames a reader still needs wait for the next one) once ``EVERY_COMMITS``
commits have been made since the last, started when a flush has just ended: the disk is
between a message's flush and the next, not in one.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path

log = logging.getLogger(__name__)

EVERY_COMMITS = 100
"""Commits between two checkpoints (a few hundred WAL pages: about SQLite's default)."""
BACKSTOP_PAGES = 10_000
"""The daemon's own connection checkpoints past this many pages (40 MB) only."""


class WalCheckpoints:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._connection: sqlite3.Connection | None = None
        self._running: asyncio.Task[None] | None = None
        self._checkpointed_at = 0
        """The commit count when the last checkpoint started."""
        self._closed = False
        self.done = 0
        """Checkpoints made (the tests count them)."""

    def flushed(self, commits: int) -> None:
        """A flush just ended, ``commits`` commits made so far: checkpoint when due."""
        if self._closed or self._running is not None:
            return
        if commits - self._checkpointed_at < EVERY_COMMITS:
            return
        self._checkpointed_at = commits
        self._running = asyncio.get_running_loop().create_task(
            self._checkpoint(), name="wal-checkpoint"
        )

    async def close(self) -> None:
        """Wait for a checkpoint under way; then its connection is closed."""
        self._closed = True
        if self._running is not None:
            await asyncio.shield(self._running)
        if self._connection is not None:
            connection, self._connection = self._connection, None
            await asyncio.to_thread(connection.close)

    async def _checkpoint(self) -> None:
        try:
            await asyncio.to_thread(self._checkpoint_now)
            self.done += 1
        except Exception as exc:  # the backstop still bounds the WAL
            log.warning("state: a WAL checkpoint failed: %r", exc)
        finally:
            self._running = None

    def _checkpoint_now(self) -> None:
        """On a thread of the executor (one at a time: ``_running``)."""
        if self._connection is None:
            self._connection = sqlite3.connect(
                self._path, isolation_level=None, check_same_thread=False
            )
            self._connection.execute("PRAGMA busy_timeout=1000")
        self._connection.execute("PRAGMA wal_checkpoint(PASSIVE)").close()
