"""What the Matrix channel remembers across restarts, in the shared state database.

Owner "matrix" of ``state/database.py`` (its own migrations and ``matrix_*`` tables,
written only by this channel):

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

The last two kinds per task/card are a ledger: ``prune`` drops those older than the
retention time. Before per-owner migrations this lived in ``<state_dir>/matrix/matrix.db``;
at first use its rows are copied over once and the file renamed ``matrix.db.migrated``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gateway_bot.state.database import Database, Params
from gateway_bot.state.owned_tables import LegacyFile, OwnedTables

OWNER = "matrix"

MATRIX_MIGRATIONS: tuple[str, ...] = (
    # 1: the tables of the former matrix.db, prefixed.
    """
    CREATE TABLE matrix_login (
        homeserver TEXT NOT NULL, user_id TEXT NOT NULL, device_id TEXT NOT NULL,
        access_token TEXT NOT NULL, PRIMARY KEY (homeserver, user_id));
    CREATE TABLE matrix_sync_position (
        user_id TEXT PRIMARY KEY, next_batch TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL);
    CREATE TABLE matrix_joined_rooms (
        user_id TEXT NOT NULL, room_id TEXT NOT NULL, PRIMARY KEY (user_id, room_id));
    CREATE TABLE matrix_direct_rooms (
        user_id TEXT NOT NULL, room_id TEXT NOT NULL, PRIMARY KEY (user_id, room_id));
    CREATE TABLE matrix_progress_messages (
        task_id TEXT PRIMARY KEY, room_id TEXT NOT NULL, event_id TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL);
    CREATE TABLE matrix_cards (
        event_id TEXT PRIMARY KEY, room_id TEXT NOT NULL, emojis_json TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL);
    CREATE TABLE matrix_encrypted_rooms_told (room_id TEXT PRIMARY KEY);
    CREATE INDEX matrix_progress_messages_created ON matrix_progress_messages(created_at);
    CREATE INDEX matrix_cards_created ON matrix_cards(created_at);
    """,
)

_LEGACY_TABLES = (
    ("login", "homeserver, user_id, device_id, access_token"),
    ("sync_position", "user_id, next_batch, updated_at"),
    ("joined_rooms", "user_id, room_id"),
    ("direct_rooms", "user_id, room_id"),
    ("progress_messages", "task_id, room_id, event_id, created_at"),
    ("cards", "event_id, room_id, emojis_json, created_at"),
    ("encrypted_rooms_told", "room_id"),
)


@dataclass(frozen=True)
class SyncPosition:
    next_batch: str | None
    joined_rooms: frozenset[str]


class MatrixStateStore:
    def __init__(self, database: Database, legacy_path: Path | None = None) -> None:
        """``legacy_path``: the channel's former own file, imported once if present."""
        legacy = None if legacy_path is None else LegacyFile(legacy_path, _LEGACY_TABLES, "matrix_")
        self._tables = OwnedTables(database, OWNER, MATRIX_MIGRATIONS, legacy)
        database.add_pruner(OWNER, self.prune)

    async def _db(self) -> Database:
        return await self._tables.ready()

    async def prune(self, before: float) -> int:
        """Retention: acknowledgement events and cards recorded before ``before``. Cards
        expire within a day, and a progress display belongs to a task long finished; the
        login, sync position and room sets are state, never pruned."""
        db = await self._db()
        count = 0
        for table in ("matrix_progress_messages", "matrix_cards"):
            count += await db.write(f"DELETE FROM {table} WHERE created_at < ?", (before,))
        return count

    # -- login ---------------------------------------------------------------------------

    async def load_login(self, homeserver: str, user_id: str) -> tuple[str, str] | None:
        """(device_id, access_token) of the stored login for this account, if any."""
        db = await self._db()
        row = await db.fetch_one(
            "SELECT device_id, access_token FROM matrix_login WHERE homeserver=? AND user_id=?",
            (homeserver, user_id),
        )
        return (str(row[0]), str(row[1])) if row else None

    async def save_login(
        self, homeserver: str, user_id: str, device_id: str, access_token: str
    ) -> None:
        db = await self._db()
        await db.write(
            "INSERT INTO matrix_login (homeserver, user_id, device_id, access_token)"
            " VALUES (?, ?, ?, ?) ON CONFLICT (homeserver, user_id) DO UPDATE SET"
            " device_id = excluded.device_id, access_token = excluded.access_token",
            (homeserver, user_id, device_id, access_token),
        )

    async def forget_login(self, homeserver: str, user_id: str) -> None:
        db = await self._db()
        await db.write(
            "DELETE FROM matrix_login WHERE homeserver=? AND user_id=?", (homeserver, user_id)
        )

    # -- sync position -------------------------------------------------------------------

    async def load_position(self, user_id: str) -> SyncPosition:
        db = await self._db()
        row = await db.fetch_one(
            "SELECT next_batch FROM matrix_sync_position WHERE user_id=?", (user_id,)
        )
        rooms = await db.fetch_all(
            "SELECT room_id FROM matrix_joined_rooms WHERE user_id=?", (user_id,)
        )
        return SyncPosition(row[0] if row else None, frozenset(r[0] for r in rooms))

    async def save_position(
        self, user_id: str, next_batch: str, joined: Iterable[str], left: Iterable[str]
    ) -> None:
        """Move the sync token and the joined-room set in one transaction, without a disk
        flush of its own: every event of the batch is stored (flushed) before this, so a
        position a power cut forgets only makes the next sync hear stored events again,
        which intake ignores by message id. It runs after every sync, on the path of the
        batch's acknowledgements (decision 0098)."""
        db = await self._db()
        statements: list[tuple[str, Params]] = [
            (
                "INSERT INTO matrix_sync_position (user_id, next_batch, updated_at)"
                " VALUES (?, ?, ?) ON CONFLICT (user_id) DO UPDATE SET"
                " next_batch = excluded.next_batch, updated_at = excluded.updated_at",
                (user_id, next_batch, time.time()),
            )
        ]
        statements += [
            (
                "INSERT INTO matrix_joined_rooms (user_id, room_id) VALUES (?, ?)"
                " ON CONFLICT DO NOTHING",
                (user_id, room),
            )
            for room in joined
        ]
        statements += [
            ("DELETE FROM matrix_joined_rooms WHERE user_id=? AND room_id=?", (user_id, room))
            for room in left
        ]
        await db.write_batch(statements, durable=False)

    async def mark_direct(self, user_id: str, room_id: str) -> None:
        db = await self._db()
        await db.write(
            "INSERT INTO matrix_direct_rooms (user_id, room_id) VALUES (?, ?)"
            " ON CONFLICT DO NOTHING",
            (user_id, room_id),
        )

    async def is_direct(self, user_id: str, room_id: str) -> bool:
        db = await self._db()
        row = await db.fetch_one(
            "SELECT 1 FROM matrix_direct_rooms WHERE user_id=? AND room_id=?", (user_id, room_id)
        )
        return row is not None

    # -- progress messages ---------------------------------------------------------------

    async def save_progress_message(self, task_id: str, room_id: str, event_id: str) -> None:
        db = await self._db()
        await db.write(
            "INSERT INTO matrix_progress_messages (task_id, room_id, event_id, created_at)"
            " VALUES (?, ?, ?, ?) ON CONFLICT (task_id) DO UPDATE SET"
            " room_id = excluded.room_id, event_id = excluded.event_id,"
            " created_at = excluded.created_at",
            (task_id, room_id, event_id, time.time()),
        )

    async def progress_message(self, task_id: str) -> str | None:
        db = await self._db()
        row = await db.fetch_one(
            "SELECT event_id FROM matrix_progress_messages WHERE task_id=?", (task_id,)
        )
        return str(row[0]) if row else None

    async def forget_progress_message(self, task_id: str) -> None:
        db = await self._db()
        await db.write("DELETE FROM matrix_progress_messages WHERE task_id=?", (task_id,))

    # -- cards ---------------------------------------------------------------------------

    async def save_card(self, event_id: str, room_id: str, emojis: list[str]) -> None:
        db = await self._db()
        await db.write(
            "INSERT INTO matrix_cards (event_id, room_id, emojis_json, created_at)"
            " VALUES (?, ?, ?, ?) ON CONFLICT (event_id) DO UPDATE SET"
            " room_id = excluded.room_id, emojis_json = excluded.emojis_json,"
            " created_at = excluded.created_at",
            (event_id, room_id, json.dumps(emojis), time.time()),
        )

    async def card_emojis(self, event_id: str) -> list[str] | None:
        db = await self._db()
        row = await db.fetch_one(
            "SELECT emojis_json FROM matrix_cards WHERE event_id=?", (event_id,)
        )
        return [str(e) for e in json.loads(row[0])] if row else None

    # -- encrypted rooms -----------------------------------------------------------------

    async def encrypted_room_told(self, room_id: str) -> bool:
        db = await self._db()
        row = await db.fetch_one(
            "SELECT 1 FROM matrix_encrypted_rooms_told WHERE room_id=?", (room_id,)
        )
        return row is not None

    async def mark_encrypted_room_told(self, room_id: str) -> None:
        db = await self._db()
        await db.write(
            "INSERT INTO matrix_encrypted_rooms_told (room_id) VALUES (?) ON CONFLICT DO NOTHING",
            (room_id,),
        )
