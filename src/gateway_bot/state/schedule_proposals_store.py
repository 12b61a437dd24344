"""Schedules the agent proposed (``outbox/schedule.json``), waiting for a person's yes or
no, in the shared database (owner "schedule_proposals"). Written by
``core/schedules/proposals.py`` only. A proposal is decided once: ``decide`` moves it from
pending in one guarded update, so two presses (or a press and ``!approve``) create at most
one schedule.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from gateway_bot.domain.messages import InboundMessage
from gateway_bot.state.database import Database, Row

OWNER = "schedule_proposals"

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE schedule_proposals (
        code TEXT PRIMARY KEY,
        channel TEXT NOT NULL,
        conversation_key TEXT NOT NULL,
        requester_id TEXT NOT NULL,
        origin_json TEXT NOT NULL,
        kind TEXT NOT NULL,
        expression TEXT NOT NULL,
        timezone TEXT NOT NULL,
        prompt TEXT NOT NULL,
        state TEXT NOT NULL,
        card_ref TEXT,
        created_at REAL NOT NULL,
        decided_by TEXT,
        decided_at REAL
    );
    """,
)

PENDING = "pending"
ALLOWED = "allowed"
DENIED = "denied"
EXPIRED = "expired"

CODE_BYTES = 6
"""12 hex characters, like approval codes: short enough to type as ``!approve CODE``."""


@dataclass(frozen=True)
class ProposalRecord:
    code: str
    channel: str
    conversation_key: str
    requester_id: str
    """The sender whose message the agent was answering: with owners, the one who decides."""
    origin: InboundMessage
    """That message: the schedule's origin once allowed (where runs post, as whom)."""
    kind: str
    expression: str
    timezone: str
    prompt: str
    state: str
    card_ref: str | None
    decided_by: str | None
    created_at: float
    """On the scheduler's clock: a proposal older than the approval expiry cannot be allowed."""


class SqlScheduleProposals:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def open(self) -> None:
        await self._db.migrate(OWNER, MIGRATIONS)

    async def create(
        self,
        origin: InboundMessage,
        kind: str,
        expression: str,
        timezone: str,
        prompt: str,
        *,
        created_at: float | None = None,
    ) -> ProposalRecord:
        code = secrets.token_hex(CODE_BYTES)
        await self._db.write(
            "INSERT INTO schedule_proposals (code, channel, conversation_key, requester_id,"
            " origin_json, kind, expression, timezone, prompt, state, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                code,
                origin.channel,
                origin.conversation_key,
                origin.sender_id,
                json.dumps(origin.to_json()),
                kind,
                expression,
                timezone,
                prompt,
                PENDING,
                time.time() if created_at is None else created_at,
            ),
        )
        found = await self.get(code)
        assert found is not None
        return found

    async def get(self, code: str) -> ProposalRecord | None:
        row = await self._db.fetch_one("SELECT * FROM schedule_proposals WHERE code = ?", (code,))
        return _proposal(row) if row is not None else None

    async def pending(self) -> list[ProposalRecord]:
        """Every proposal nobody decided yet, oldest first (expired ones included until a
        press expires them: the dashboard lists what a card would still offer)."""
        rows = await self._db.fetch_all(
            "SELECT * FROM schedule_proposals WHERE state = ? ORDER BY created_at", (PENDING,)
        )
        return [_proposal(row) for row in rows]

    async def set_card(self, code: str, card_ref: str) -> None:
        await self._db.write(
            "UPDATE schedule_proposals SET card_ref = ? WHERE code = ?", (card_ref, code)
        )

    async def decide(self, code: str, state: str, decided_by: str) -> bool:
        """Pending -> ``state``; False when it was decided already."""
        changed = await self._db.write(
            "UPDATE schedule_proposals SET state = ?, decided_by = ?, decided_at = ?"
            " WHERE code = ? AND state = ?",
            (state, decided_by, time.time(), code, PENDING),
        )
        return changed == 1


def _proposal(row: Row) -> ProposalRecord:
    origin: dict[str, Any] = json.loads(row["origin_json"])
    return ProposalRecord(
        code=row["code"],
        channel=row["channel"],
        conversation_key=row["conversation_key"],
        requester_id=row["requester_id"],
        origin=InboundMessage.from_json(origin),
        kind=row["kind"],
        expression=row["expression"],
        timezone=row["timezone"],
        prompt=row["prompt"],
        state=row["state"],
        card_ref=row["card_ref"],
        decided_by=row["decided_by"],
        created_at=row["created_at"],
    )
