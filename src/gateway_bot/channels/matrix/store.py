"""What the Matrix channel remembers across restarts, in its own SQLite file.

``<state_dir>/matrix/matrix.db``, written only by this channel (one writer per file):

* the login (user, device, access token), so a password login keeps one device and the
  homeserver's transaction-id de-duplication still recognises re-sends after a restart;
* the sync token and the rooms joined at that token, committed together and only after
  every event before the token was submitted: a restart resumes exactly there (and a room
  not yet joined at the token has its pre-join history skipped);
* the rooms an invite marked as direct (one-to-one) chats;
* per task, the acknowledgement event that live progress edits;
* the cards sent (event id, button emojis), so the listener passes on only reactions that
  press a button;
* the encrypted rooms already told that the bot cannot read them.

Why its own file rather than a migration in ``state.db``: the core's schema belongs to the
core; this file can be deleted to forget the channel's state without touching the tasks.
Each operation opens a short-lived connection in a worker thread: writes are rare (one per
sync batch or sent message), and nothing is left open when the daemon exits.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

_SCHEMA = """
CREATE TABLE IF NOT EXISTS login (
    homeserver TEXT NOT NULL, user_id TEXT NOT NULL, device_id TEXT NOT NULL,
    access_token TEXT NOT NULL, PRIMARY KEY (homeserver, user_id));
CREATE TABLE IF NOT EXISTS sync_position (
    user_id TEXT PRIMARY KEY, next_batch TEXT NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS joined_rooms (
    user_id TEXT NOT NULL, room_id TEXT NOT NULL, PRIMARY KEY (user_id, room_id));
CREATE TABLE IF NOT EXISTS direct_rooms (
    user_id TEXT NOT NULL, room_id TEXT NOT NULL, PRIMARY KEY (user_id, room_id));
CREATE TABLE IF NOT EXISTS progress_messages (
    task_id TEXT PRIMARY KEY, room_id TEXT NOT NULL, event_id TEXT NOT NULL,
    created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS cards (
    event_id TEXT PRIMARY KEY, room_id TEXT NOT NULL, emojis_json TEXT NOT NULL,
    created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS encrypted_rooms_told (room_id TEXT PRIMARY KEY);
"""

T = TypeVar("T")


@dataclass(frozen=True)
class SyncPosition:
    next_batch: str | None
    joined_rooms: frozenset[str]


class MatrixStateStore:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = asyncio.Lock()

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        async with self._lock:
            return await asyncio.to_thread(self._in_thread, work)

    def _in_thread(self, work: Callable[[sqlite3.Connection], T]) -> T:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self._path, timeout=30)
        try:
            connection.executescript(_SCHEMA)
            with connection:
                return work(connection)
        finally:
            connection.close()

    # -- login ---------------------------------------------------------------------------

    async def load_login(self, homeserver: str, user_id: str) -> tuple[str, str] | None:
        """(device_id, access_token) of the stored login for this account, if any."""

        def read(db: sqlite3.Connection) -> tuple[str, str] | None:
            row = db.execute(
                "SELECT device_id, access_token FROM login WHERE homeserver=? AND user_id=?",
                (homeserver, user_id),
            ).fetchone()
            return (str(row[0]), str(row[1])) if row else None

        return await self._run(read)

    async def save_login(
        self, homeserver: str, user_id: str, device_id: str, access_token: str
    ) -> None:
        await self._run(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO login VALUES (?, ?, ?, ?)",
                (homeserver, user_id, device_id, access_token),
            )
        )

    async def forget_login(self, homeserver: str, user_id: str) -> None:
        await self._run(
            lambda db: db.execute(
                "DELETE FROM login WHERE homeserver=? AND user_id=?", (homeserver, user_id)
            )
        )

    # -- sync position -------------------------------------------------------------------

    async def load_position(self, user_id: str) -> SyncPosition:
        def read(db: sqlite3.Connection) -> SyncPosition:
            row = db.execute(
                "SELECT next_batch FROM sync_position WHERE user_id=?", (user_id,)
            ).fetchone()
            rooms = db.execute("SELECT room_id FROM joined_rooms WHERE user_id=?", (user_id,))
            return SyncPosition(row[0] if row else None, frozenset(r[0] for r in rooms))

        return await self._run(read)

    async def save_position(
        self, user_id: str, next_batch: str, joined: Iterable[str], left: Iterable[str]
    ) -> None:
        """Move the sync token and the joined-room set in one transaction."""
        joined, left = list(joined), list(left)

        def write(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT OR REPLACE INTO sync_position VALUES (?, ?, ?)",
                (user_id, next_batch, time.time()),
            )
            db.executemany(
                "INSERT OR IGNORE INTO joined_rooms (user_id, room_id) VALUES (?, ?)",
                [(user_id, room) for room in joined],
            )
            db.executemany(
                "DELETE FROM joined_rooms WHERE user_id=? AND room_id=?",
                [(user_id, room) for room in left],
            )

        await self._run(write)

    async def mark_direct(self, user_id: str, room_id: str) -> None:
        await self._run(
            lambda db: db.execute(
                "INSERT OR IGNORE INTO direct_rooms VALUES (?, ?)",
                (user_id, room_id),
            )
        )

    async def is_direct(self, user_id: str, room_id: str) -> bool:
        def read(db: sqlite3.Connection) -> bool:
            row = db.execute(
                "SELECT 1 FROM direct_rooms WHERE user_id=? AND room_id=?", (user_id, room_id)
            ).fetchone()
            return row is not None

        return await self._run(read)

    # -- progress messages ---------------------------------------------------------------

    async def save_progress_message(self, task_id: str, room_id: str, event_id: str) -> None:
        await self._run(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO progress_messages VALUES (?, ?, ?, ?)",
                (task_id, room_id, event_id, time.time()),
            )
        )

    async def progress_message(self, task_id: str) -> str | None:
        def read(db: sqlite3.Connection) -> str | None:
            row = db.execute(
                "SELECT event_id FROM progress_messages WHERE task_id=?", (task_id,)
            ).fetchone()
            return str(row[0]) if row else None

        return await self._run(read)

    async def forget_progress_message(self, task_id: str) -> None:
        await self._run(
            lambda db: db.execute("DELETE FROM progress_messages WHERE task_id=?", (task_id,))
        )

    # -- cards ---------------------------------------------------------------------------

    async def save_card(self, event_id: str, room_id: str, emojis: list[str]) -> None:
        await self._run(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO cards VALUES (?, ?, ?, ?)",
                (event_id, room_id, json.dumps(emojis), time.time()),
            )
        )

    async def card_emojis(self, event_id: str) -> list[str] | None:
        def read(db: sqlite3.Connection) -> list[str] | None:
            row = db.execute(
                "SELECT emojis_json FROM cards WHERE event_id=?", (event_id,)
            ).fetchone()
            return [str(e) for e in json.loads(row[0])] if row else None

        return await self._run(read)

    # -- encrypted rooms -----------------------------------------------------------------

    async def encrypted_room_told(self, room_id: str) -> bool:
        def read(db: sqlite3.Connection) -> bool:
            row = db.execute(
                "SELECT 1 FROM encrypted_rooms_told WHERE room_id=?", (room_id,)
            ).fetchone()
            return row is not None

        return await self._run(read)

    async def mark_encrypted_room_told(self, room_id: str) -> None:
        await self._run(
            lambda db: db.execute(
                "INSERT OR IGNORE INTO encrypted_rooms_told VALUES (?)", (room_id,)
            )
        )
