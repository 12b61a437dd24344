"""WAL checkpoints run beside the work (``state/wal_checkpoints``): a commit no longer
copies the WAL back into the database file itself (SQLite did so inside the commit that
crossed 1,000 pages, a message's p99, issue 33); a connection of its own does, every
``EVERY_COMMITS`` commits, right after a flush."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from gateway_bot.state.database import Database
from gateway_bot.state.sqlite_backend import SqliteBackend
from gateway_bot.state.wal_checkpoints import BACKSTOP_PAGES, EVERY_COMMITS

ROW = "x" * 48_000
"""A row of about 12 pages: fewer than ``EVERY_COMMITS`` of them pass SQLite's default
checkpoint threshold (1,000 pages)."""


async def size(path: Path) -> int:
    return (await asyncio.to_thread(path.stat)).st_size


async def test_commits_leave_the_wal_alone_and_the_checkpointer_copies_it_back(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    database = Database()
    await database.open(path)
    try:
        backend = database.backend
        assert isinstance(backend, SqliteBackend)
        pragma = await database.fetch_one("PRAGMA wal_autocheckpoint")
        assert pragma is not None
        assert pragma[0] == BACKSTOP_PAGES
        await database.write("CREATE TABLE notes (body TEXT)")
        before = await size(path)
        while database.backend.flusher.commits < EVERY_COMMITS - 5:
            await database.write("INSERT INTO notes (body) VALUES (?)", (ROW,))
        wal = await size(Path(f"{path}-wal"))
        assert wal > 1_000 * 4096, "the rows passed SQLite's own threshold"
        assert await size(path) == before, "a commit copied the WAL back itself"
        for _ in range(10):
            await database.write("INSERT INTO notes (body) VALUES (?)", (ROW,))
        deadline = time.monotonic() + 10
        while await size(path) < 90 * len(ROW):
            assert time.monotonic() < deadline, "no checkpoint copied the WAL back"
            await asyncio.sleep(0.01)
        count = await database.fetch_one("SELECT count(*) FROM notes")
        assert count is not None
        assert count[0] == database.backend.flusher.commits - 1
    finally:
        await database.close()


async def test_a_message_committed_on_a_closed_connection_fails_at_once(tmp_path: Path) -> None:
    """The commit and its fsync are one call on SQLite's thread; a connection that is gone
    refuses that call before it queues anything, and the store says so at once (it waited
    for ever for a commit that never came, holding the write lock)."""
    database = Database()
    await database.open(tmp_path / "state.db")
    await database.write("CREATE TABLE notes (body TEXT)")
    await database.connection.close()
    with pytest.raises(ValueError, match="Connection closed"):
        await asyncio.wait_for(
            database.batch_flushed([("INSERT INTO notes (body) VALUES (?)", ("x",))]), 10
        )
