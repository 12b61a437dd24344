"""What the Slack channel has already posted, so a restart never posts it twice.

Slack's Web API has no idempotency key: ``chat.postMessage`` called twice posts twice. So
every post the channel makes for a task is written here in two steps: an *intent* (task,
kind, part) before the call and the message ``ts`` after it. A post with a ts is never
made again; an intent without one means the daemon died inside the call, and the caller
looks for the message in Slack (it carries the task id in its metadata) before posting.

The same two steps guard outbox uploads (per thread and file content, so a file is
uploaded once even though the outbox keeps it across tasks), and the table of threads the
bot takes part in decides which un-mentioned thread replies engage it.

Kept in its own SQLite file (``<state_dir>/slack/slack.db``): the Slack channel is its
only writer, and the core's schema stays free of channel details. Calls are tiny; they run
on a worker thread (``asyncio.to_thread``) one at a time.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SCHEMA = (
    # 1: posts per task, uploads per thread, threads the bot is in.
    """
    CREATE TABLE posts (
        task_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        part INTEGER NOT NULL,
        channel TEXT NOT NULL,
        ts TEXT,
        intended_at REAL NOT NULL,
        PRIMARY KEY (task_id, kind, part)
    );
    CREATE TABLE uploads (
        channel TEXT NOT NULL,
        thread_ts TEXT NOT NULL,
        name TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        file_id TEXT,
        intended_at REAL NOT NULL,
        PRIMARY KEY (channel, thread_ts, name, sha256)
    );
    CREATE TABLE threads (
        team TEXT NOT NULL,
        channel TEXT NOT NULL,
        thread_ts TEXT NOT NULL,
        PRIMARY KEY (team, channel, thread_ts)
    );
    """,
)


@dataclass(frozen=True)
class PostRecord:
    channel: str
    ts: str | None
    """None: the post was attempted but not confirmed (the daemon died inside the call)."""
    intended_at: float


@dataclass(frozen=True)
class UploadRecord:
    file_id: str | None
    intended_at: float


class SlackRecords:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._db: sqlite3.Connection | None = None
        self._lock = asyncio.Lock()

    async def _run(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        async with self._lock:
            return await asyncio.to_thread(self._execute, sql, args)

    def _execute(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        if self._db is None:
            self._db = self._open()
        with self._db:
            return self._db.execute(sql, args).fetchall()

    def _open(self) -> sqlite3.Connection:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        for number, script in enumerate(_SCHEMA[version:], start=version + 1):
            db.executescript(f"BEGIN; {script} PRAGMA user_version = {number}; COMMIT;")
        return db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # -- posts -------------------------------------------------------------------------

    async def post(self, task_id: str, kind: str, part: int) -> PostRecord | None:
        rows = await self._run(
            "SELECT channel, ts, intended_at FROM posts WHERE task_id=? AND kind=? AND part=?",
            (task_id, kind, part),
        )
        return PostRecord(*rows[0]) if rows else None

    async def intend_post(self, task_id: str, kind: str, part: int, channel: str) -> None:
        await self._run(
            "INSERT OR IGNORE INTO posts (task_id, kind, part, channel, intended_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (task_id, kind, part, channel, time.time()),
        )

    async def confirm_post(self, task_id: str, kind: str, part: int, ts: str) -> None:
        await self._run(
            "UPDATE posts SET ts=? WHERE task_id=? AND kind=? AND part=?",
            (ts, task_id, kind, part),
        )

    # -- uploads -----------------------------------------------------------------------

    async def upload(
        self, channel: str, thread_ts: str, name: str, sha256: str
    ) -> UploadRecord | None:
        rows = await self._run(
            "SELECT file_id, intended_at FROM uploads "
            "WHERE channel=? AND thread_ts=? AND name=? AND sha256=?",
            (channel, thread_ts, name, sha256),
        )
        return UploadRecord(*rows[0]) if rows else None

    async def intend_upload(self, channel: str, thread_ts: str, name: str, sha256: str) -> None:
        await self._run(
            "INSERT OR IGNORE INTO uploads (channel, thread_ts, name, sha256, intended_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (channel, thread_ts, name, sha256, time.time()),
        )

    async def confirm_upload(
        self, channel: str, thread_ts: str, name: str, sha256: str, file_id: str
    ) -> None:
        await self._run(
            "UPDATE uploads SET file_id=? WHERE channel=? AND thread_ts=? AND name=? AND sha256=?",
            (file_id, channel, thread_ts, name, sha256),
        )

    # -- threads -----------------------------------------------------------------------

    async def join_thread(self, team: str, channel: str, thread_ts: str) -> None:
        await self._run(
            "INSERT OR IGNORE INTO threads (team, channel, thread_ts) VALUES (?, ?, ?)",
            (team, channel, thread_ts),
        )

    async def in_thread(self, team: str, channel: str, thread_ts: str) -> bool:
        rows = await self._run(
            "SELECT 1 FROM threads WHERE team=? AND channel=? AND thread_ts=?",
            (team, channel, thread_ts),
        )
        return bool(rows)
