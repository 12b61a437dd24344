"""Approvals and room memberships, in the shared state database.

Its own class (sharing the store's connection) so the task store stays small; the core
reaches it as ``store.approvals`` through the ApprovalStore protocol.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

from gateway_bot.domain.records import ApprovalRecord, ApprovalState
from gateway_bot.state.database import Database, Row

CODE_BYTES = 6
"""Approval codes are 12 hex characters (48 bits): still short enough to type as
``!approve CODE``, and a clash between two live codes is out of reach (a clash with any
code ever issued is retried anyway)."""
_CODE_ATTEMPTS = 5


class SqlApprovals:
    def __init__(self, database: Database) -> None:
        self._database = database

    async def pending_for(self, channel: str, room: str, sender_id: str) -> ApprovalRecord | None:
        row = await self._database.fetch_one(
            "SELECT * FROM approvals WHERE channel = ? AND room = ? AND sender_id = ?"
            " AND state = 'pending'",
            (channel, room, sender_id),
        )
        return _approval(row) if row else None

    async def get(self, code: str) -> ApprovalRecord | None:
        row = await self._database.fetch_one("SELECT * FROM approvals WHERE code = ?", (code,))
        return _approval(row) if row else None

    async def create(
        self,
        *,
        channel: str,
        room: str,
        room_title: str,
        sender_id: str,
        sender_name: str,
        preview: str,
        expires_at: float,
        kind: str = "sender",
    ) -> ApprovalRecord:
        row = (
            channel,
            room,
            room_title,
            sender_id,
            sender_name,
            preview,
            time.time(),
            expires_at,
            kind,
        )
        for _ in range(_CODE_ATTEMPTS):
            code = secrets.token_hex(CODE_BYTES)
            # A code already taken inserts nothing (the primary key), and the next one is
            # tried; any other conflict (a second pending card for the same sender) still
            # raises, because that is a bug, not bad luck.
            inserted = await self._database.write(
                "INSERT INTO approvals (code, channel, room, room_title, sender_id, sender_name,"
                " preview, state, created_at, expires_at, kind)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?)"
                " ON CONFLICT (code) DO NOTHING",
                (code, *row),
            )
            if inserted == 1:
                record = await self.get(code)
                assert record is not None
                return record
        raise RuntimeError(f"no free approval code after {_CODE_ATTEMPTS} attempts")

    async def set_card(
        self, code: str, card_channel: str, card_context: dict[str, Any], card_ref: str
    ) -> None:
        await self._database.write(
            "UPDATE approvals SET card_channel = ?, card_context = ?, card_ref = ? WHERE code = ?",
            (card_channel, json.dumps(card_context), card_ref, code),
        )

    async def hold(self, code: str, task_id: str) -> None:
        """Attach a task to the approval (idempotent: a re-authenticated task stays once)."""
        await self._database.write(
            "INSERT INTO approval_tasks (code, task_id, held_at) VALUES (?, ?, ?)"
            " ON CONFLICT DO NOTHING",
            (code, task_id, time.time()),
        )

    async def held_tasks(self, code: str) -> list[str]:
        rows = await self._database.fetch_all(
            "SELECT task_id FROM approval_tasks WHERE code = ? ORDER BY held_at, rowid", (code,)
        )
        return [str(row[0]) for row in rows]

    async def shown_tasks(self, code: str) -> list[str]:
        """The held tasks whose messages an owner has seen on the card: what Allow runs."""
        rows = await self._database.fetch_all(
            "SELECT task_id FROM approval_tasks WHERE code = ? AND shown = 1"
            " ORDER BY held_at, rowid",
            (code,),
        )
        return [str(row[0]) for row in rows]

    async def mark_shown(self, code: str, task_ids: list[str]) -> None:
        """Record that the card (as sent or edited) now quotes these held messages."""
        async with self._database.transaction() as db:
            for task_id in task_ids:
                await db.execute(
                    "UPDATE approval_tasks SET shown = 1 WHERE code = ? AND task_id = ?",
                    (code, task_id),
                )

    async def decide(self, code: str, state: ApprovalState, decided_by: str) -> bool:
        """Move a pending approval to ``state``; False if it was no longer pending."""
        changed = await self._database.write(
            "UPDATE approvals SET state = ?, decided_by = ?, decided_at = ?"
            " WHERE code = ? AND state = 'pending'",
            (state.value, decided_by, time.time(), code),
        )
        return changed == 1

    async def expired(self, now: float) -> list[ApprovalRecord]:
        rows = await self._database.fetch_all(
            "SELECT * FROM approvals WHERE state = 'pending' AND expires_at <= ?", (now,)
        )
        return [_approval(row) for row in rows]

    async def unsent_cards(self) -> list[ApprovalRecord]:
        rows = await self._database.fetch_all(
            "SELECT * FROM approvals WHERE state = 'pending' AND card_ref IS NULL"
            " ORDER BY created_at, rowid"
        )
        return [_approval(row) for row in rows]

    async def add_member(self, channel: str, room: str, sender_id: str, added_by: str) -> None:
        await self._database.write(
            "INSERT INTO room_members (channel, room, sender_id, added_by, added_at)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (channel, room, sender_id, added_by, time.time()),
        )

    async def is_member(self, channel: str, room: str, sender_id: str) -> bool:
        row = await self._database.fetch_one(
            "SELECT 1 FROM room_members WHERE channel = ? AND room = ? AND sender_id = ?",
            (channel, room, sender_id),
        )
        return row is not None

    async def member_rooms(self, channel: str, sender_id: str) -> list[tuple[str, str]]:
        """The rooms ``sender_id`` was approved in, as (room, its latest known title)."""
        rows = await self._database.fetch_all(
            "SELECT m.room, (SELECT a.room_title FROM approvals a WHERE a.channel = m.channel"
            " AND a.room = m.room ORDER BY a.created_at DESC LIMIT 1)"
            " FROM room_members m WHERE m.channel = ? AND m.sender_id = ? ORDER BY m.added_at",
            (channel, sender_id),
        )
        return [(str(r[0]), str(r[1] or r[0])) for r in rows]

    async def remove_member(self, channel: str, sender_id: str, room: str | None) -> int:
        """Revoke an approval in ``room``, or in every room of the channel when None."""
        if room is None:
            return await self._database.write(
                "DELETE FROM room_members WHERE channel = ? AND sender_id = ?",
                (channel, sender_id),
            )
        return await self._database.write(
            "DELETE FROM room_members WHERE channel = ? AND room = ? AND sender_id = ?",
            (channel, room, sender_id),
        )


def _approval(row: Row) -> ApprovalRecord:
    return ApprovalRecord(
        code=row["code"],
        channel=row["channel"],
        room=row["room"],
        room_title=row["room_title"],
        sender_id=row["sender_id"],
        sender_name=row["sender_name"],
        preview=row["preview"],
        state=ApprovalState(row["state"]),
        card_channel=row["card_channel"],
        card_context=json.loads(row["card_context"]) if row["card_context"] else None,
        card_ref=row["card_ref"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        decided_by=row["decided_by"],
        decided_at=row["decided_at"],
        kind=row["kind"],
    )
