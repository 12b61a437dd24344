"""What the Slack channel has already posted, so a restart never posts it twice.

Slack's Web API has no idempotency key: ``chat.postMessage`` called twice posts twice. So
every post the channel makes for a task is written here in two steps: an *intent* (task,
kind, part) before the call and the message ``ts`` after it. A post with a ts is never
made again; an intent without one means the daemon died inside the call, and the caller
looks for the message in Slack (it carries the task id in its metadata) before posting.

The same two steps guard outbox uploads (per thread and file content, so a file is
uploaded once even though the outbox keeps it across tasks), and the table of threads the
bot takes part in decides which un-mentioned thread replies engage it.

Owner "slack" of the shared state database (``state/database.py``: its own migrations and
``slack_*`` tables; the Slack channel is their only writer). Post and upload records are a
ledger: ``prune`` drops confirmed ones older than the retention time. Before per-owner
migrations they lived in ``<state_dir>/slack/slack.db``; at first use its rows are copied
over once and the file renamed ``slack.db.migrated``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from gateway_bot.state.database import Database
from gateway_bot.state.owned_tables import LegacyFile, OwnedTables

OWNER = "slack"

KNOWN_THREADS = 10_000
"""Threads the bot is in that ``SlackRecords`` remembers (~1.6 MB at most, measured)."""

SLACK_MIGRATIONS: tuple[str, ...] = (
    # 1: posts per task, uploads per thread, threads the bot is in (the former slack.db's
    # schema version 1, prefixed).
    """
    CREATE TABLE slack_posts (
        task_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        part INTEGER NOT NULL,
        channel TEXT NOT NULL,
        ts TEXT,
        intended_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (task_id, kind, part)
    );
    CREATE INDEX slack_posts_intended ON slack_posts(intended_at);
    CREATE TABLE slack_uploads (
        channel TEXT NOT NULL,
        thread_ts TEXT NOT NULL,
        name TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        file_id TEXT,
        intended_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (channel, thread_ts, name, sha256)
    );
    CREATE INDEX slack_uploads_intended ON slack_uploads(intended_at);
    CREATE TABLE slack_threads (
        team TEXT NOT NULL,
        channel TEXT NOT NULL,
        thread_ts TEXT NOT NULL,
        PRIMARY KEY (team, channel, thread_ts)
    );
    """,
)

_LEGACY_TABLES = (
    ("posts", "task_id, kind, part, channel, ts, intended_at"),
    ("uploads", "channel, thread_ts, name, sha256, file_id, intended_at"),
    ("threads", "team, channel, thread_ts"),
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
    def __init__(self, database: Database, legacy_path: Path | None = None) -> None:
        """``legacy_path``: the channel's former own file, imported once if present."""
        legacy = None if legacy_path is None else LegacyFile(legacy_path, _LEGACY_TABLES, "slack_")
        self._tables = OwnedTables(database, OWNER, SLACK_MIGRATIONS, legacy)
        database.add_pruner(OWNER, self.prune)
        self._known_threads: dict[tuple[str, str, str], None] = {}
        """Threads seen in the table lately (oldest first, at most ``KNOWN_THREADS``): a
        thread never leaves it, so a reply in one needs no read (decision 0104)."""

    async def _db(self) -> Database:
        return await self._tables.ready()

    async def prune(self, before: float) -> int:
        """Retention: post and upload records intended before ``before`` and confirmed
        (with a ts / file id). An unconfirmed intent is kept whatever its age: it is what
        makes a late re-send look in Slack first instead of posting twice. Threads the bot
        is in are state (they decide engagement), never pruned."""
        db = await self._db()
        posts = await db.write(
            "DELETE FROM slack_posts WHERE intended_at < ? AND ts IS NOT NULL", (before,)
        )
        uploads = await db.write(
            "DELETE FROM slack_uploads WHERE intended_at < ? AND file_id IS NOT NULL", (before,)
        )
        return posts + uploads

    # -- posts -------------------------------------------------------------------------

    async def post(self, task_id: str, kind: str, part: int) -> PostRecord | None:
        db = await self._db()
        row = await db.fetch_one(
            "SELECT channel, ts, intended_at FROM slack_posts"
            " WHERE task_id=? AND kind=? AND part=?",
            (task_id, kind, part),
        )
        return PostRecord(row[0], row[1], row[2]) if row else None

    async def intend_post(self, task_id: str, kind: str, part: int, channel: str) -> bool:
        """Committed before the post (so a restart after kill -9 looks in Slack first);
        False when the post already had a record (this one is then left as it was).
        Only a reply's intent also waits for the disk: after a power cut, a reply is found
        in Slack instead of posted twice. The acknowledgement and the progress line do not
        (decision 0104: that flush would come between a message and its "Working on it"); a
        power cut in the ~50 ms before the next flush can post a second "Working on it",
        which is cosmetic."""
        db = await self._db()
        added = await db.write(
            "INSERT INTO slack_posts (task_id, kind, part, channel, intended_at)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (task_id, kind, part, channel, time.time()),
            durable=kind == "reply",
        )
        return added > 0

    async def confirm_post(self, task_id: str, kind: str, part: int, ts: str) -> None:
        """After the post, no flush of its own: an intent that lost its ts to a power cut
        is looked up in Slack before anything is posted again."""
        db = await self._db()
        await db.write(
            "UPDATE slack_posts SET ts=? WHERE task_id=? AND kind=? AND part=?",
            (ts, task_id, kind, part),
            durable=False,
        )

    # -- uploads -----------------------------------------------------------------------

    async def upload(
        self, channel: str, thread_ts: str, name: str, sha256: str
    ) -> UploadRecord | None:
        db = await self._db()
        row = await db.fetch_one(
            "SELECT file_id, intended_at FROM slack_uploads"
            " WHERE channel=? AND thread_ts=? AND name=? AND sha256=?",
            (channel, thread_ts, name, sha256),
        )
        return UploadRecord(row[0], row[1]) if row else None

    async def intend_upload(self, channel: str, thread_ts: str, name: str, sha256: str) -> None:
        db = await self._db()
        await db.write(
            "INSERT INTO slack_uploads (channel, thread_ts, name, sha256, intended_at)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (channel, thread_ts, name, sha256, time.time()),
        )

    async def confirm_upload(
        self, channel: str, thread_ts: str, name: str, sha256: str, file_id: str
    ) -> None:
        db = await self._db()
        await db.write(
            "UPDATE slack_uploads SET file_id=?"
            " WHERE channel=? AND thread_ts=? AND name=? AND sha256=?",
            (file_id, channel, thread_ts, name, sha256),
        )

    # -- threads -----------------------------------------------------------------------

    async def join_thread(self, team: str, channel: str, thread_ts: str) -> None:
        """After the acknowledgement; flushed with the task's reply record (or redone when
        recovery acknowledges the task again)."""
        db = await self._db()
        await db.write(
            "INSERT INTO slack_threads (team, channel, thread_ts) VALUES (?, ?, ?)"
            " ON CONFLICT DO NOTHING",
            (team, channel, thread_ts),
            durable=False,
        )
        self._know_thread((team, channel, thread_ts))

    async def in_thread(self, team: str, channel: str, thread_ts: str) -> bool:
        """Whether the bot takes part in the thread: remembered once seen (rows are never
        deleted, so a remembered yes stays true; a no is read again, since another replica
        may have joined the thread since)."""
        key = (team, channel, thread_ts)
        if key in self._known_threads:
            return True
        db = await self._db()
        row = await db.fetch_one(
            "SELECT 1 FROM slack_threads WHERE team=? AND channel=? AND thread_ts=?", key
        )
        if row is not None:
            self._know_thread(key)
        return row is not None

    def _know_thread(self, key: tuple[str, str, str]) -> None:
        self._known_threads.pop(key, None)
        self._known_threads[key] = None
        if len(self._known_threads) > KNOWN_THREADS:
            del self._known_threads[next(iter(self._known_threads))]
