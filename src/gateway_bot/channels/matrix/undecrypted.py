"""Encrypted messages the bot could not decrypt yet, kept until their keys arrive.

A Megolm message whose session the bot never received is recorded here (in the shared
state database, owner "matrix_e2ee") before the sync token moves past it, so it is never
silently lost: the listener asks for the keys, tells the sender once after
``undecryptable_notice_s``, and hands the message to the core as soon as it decrypts, also
after a restart.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from gateway_bot.state.database import Database
from gateway_bot.state.owned_tables import OwnedTables

OWNER = "matrix_e2ee"

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE matrix_undecrypted (
        event_id TEXT PRIMARY KEY, room_id TEXT NOT NULL, sender TEXT NOT NULL,
        event_json TEXT NOT NULL, received_at DOUBLE PRECISION NOT NULL,
        noticed INTEGER NOT NULL DEFAULT 0);
    """,
)

JsonDict = dict[str, Any]


@dataclass(frozen=True)
class Undecrypted:
    event_id: str
    room_id: str
    sender: str
    event: JsonDict
    received_at: float
    noticed: bool


class UndecryptedStore:
    def __init__(self, database: Database) -> None:
        self._tables = OwnedTables(database, OWNER, MIGRATIONS)

    async def _db(self) -> Database:
        return await self._tables.ready()

    async def keep(self, room_id: str, event: JsonDict) -> None:
        db = await self._db()
        await db.write(
            "INSERT INTO matrix_undecrypted (event_id, room_id, sender, event_json, received_at)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (event_id) DO NOTHING",
            (
                str(event["event_id"]),
                room_id,
                str(event.get("sender", "")),
                json.dumps(event),
                time.time(),
            ),
        )

    async def pending(self) -> list[Undecrypted]:
        db = await self._db()
        rows = await db.fetch_all(
            "SELECT event_id, room_id, sender, event_json, received_at, noticed"
            " FROM matrix_undecrypted ORDER BY received_at"
        )
        return [
            Undecrypted(str(r[0]), str(r[1]), str(r[2]), json.loads(r[3]), float(r[4]), bool(r[5]))
            for r in rows
        ]

    async def mark_noticed(self, event_id: str) -> None:
        db = await self._db()
        await db.write("UPDATE matrix_undecrypted SET noticed = 1 WHERE event_id = ?", (event_id,))

    async def forget(self, event_id: str) -> None:
        db = await self._db()
        await db.write("DELETE FROM matrix_undecrypted WHERE event_id = ?", (event_id,))
