"""Action approvals (decision 0087) in the shared database (owner "action_approvals"): each
request the agent's run (or the egress proxy) made, its card, its decision; and the
conversation rules "Always in this conversation" added. Written by
``core/actions/approvals.py`` only.

A request is decided once: ``decide`` moves it from pending in one guarded update, so a
press, a typed ``!allow`` and the timeout race to one outcome. A request still pending when
the daemon starts was asked by a run that no longer exists: ``abandon_pending`` closes it,
so a late press on its card is refused (a decision never applies to another request).
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from gateway_bot.state.database import Database, Row

OWNER = "action_approvals"

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE action_approvals (
        code TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL,
        task_id TEXT,
        kind TEXT NOT NULL,
        summary TEXT NOT NULL,
        details TEXT NOT NULL,
        rule TEXT NOT NULL,
        signature TEXT NOT NULL,
        options_json TEXT NOT NULL,
        requester_id TEXT,
        state TEXT NOT NULL,
        card_channel TEXT,
        card_context_json TEXT,
        card_ref TEXT,
        created_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        decided_by TEXT,
        decided_at REAL,
        reason TEXT NOT NULL DEFAULT '',
        answer TEXT
    );
    CREATE INDEX action_approvals_state ON action_approvals (state);
    CREATE TABLE action_approval_refusals (
        code TEXT NOT NULL,
        channel TEXT NOT NULL,
        who TEXT NOT NULL,
        at REAL NOT NULL
    );
    CREATE TABLE conversation_action_rules (
        conversation_id TEXT NOT NULL,
        signature TEXT NOT NULL,
        added_by TEXT NOT NULL,
        added_at REAL NOT NULL,
        PRIMARY KEY (conversation_id, signature)
    );
    """,
)

PENDING = "pending"
ALLOWED = "allowed"
DENIED = "denied"
EXPIRED = "expired"
CANCELLED = "cancelled"
"""The run that asked ended (``/stop``, its time limit) before anyone decided."""
ABANDONED = "abandoned"
"""The daemon restarted while it was pending: the run that asked is gone."""

CODE_BYTES = 6


@dataclass(frozen=True)
class ActionApprovalRecord:
    code: str
    conversation_id: str
    task_id: str | None
    kind: str
    summary: str
    details: str
    rule: str
    signature: str
    options: tuple[str, ...]
    requester_id: str | None
    state: str
    card_channel: str | None
    card_context: dict[str, Any] | None
    card_ref: str | None
    created_at: float
    expires_at: float
    decided_by: str | None
    decided_at: float | None
    reason: str
    answer: str | None


@dataclass(frozen=True)
class ConversationRule:
    signature: str
    added_by: str
    added_at: float


class SqlActionApprovals:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def open(self) -> None:
        await self._db.migrate(OWNER, MIGRATIONS)

    async def create(
        self,
        *,
        conversation_id: str,
        task_id: str | None,
        kind: str,
        summary: str,
        details: str,
        rule: str,
        signature: str,
        options: tuple[str, ...],
        requester_id: str | None,
        expires_at: float,
    ) -> ActionApprovalRecord:
        code = secrets.token_hex(CODE_BYTES)
        await self._db.write(
            "INSERT INTO action_approvals (code, conversation_id, task_id, kind, summary,"
            " details, rule, signature, options_json, requester_id, state, created_at,"
            " expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                code,
                conversation_id,
                task_id,
                kind,
                summary,
                details,
                rule,
                signature,
                json.dumps(list(options)),
                requester_id,
                PENDING,
                time.time(),
                expires_at,
            ),
        )
        found = await self.get(code)
        assert found is not None
        return found

    async def get(self, code: str) -> ActionApprovalRecord | None:
        row = await self._db.fetch_one("SELECT * FROM action_approvals WHERE code = ?", (code,))
        return _record(row) if row is not None else None

    async def set_card(
        self, code: str, channel: str, context: dict[str, Any], card_ref: str
    ) -> None:
        await self._db.write(
            "UPDATE action_approvals SET card_channel = ?, card_context_json = ?, card_ref = ?"
            " WHERE code = ?",
            (channel, json.dumps(context), card_ref, code),
        )

    async def decide(
        self, code: str, state: str, decided_by: str, reason: str = "", answer: str | None = None
    ) -> bool:
        """Pending -> ``state``; False when it was decided (or closed) already."""
        changed = await self._db.write(
            "UPDATE action_approvals SET state = ?, decided_by = ?, decided_at = ?, reason = ?,"
            " answer = ? WHERE code = ? AND state = ?",
            (state, decided_by, time.time(), reason, answer, code, PENDING),
        )
        return changed == 1

    async def pending(self) -> list[ActionApprovalRecord]:
        rows = await self._db.fetch_all(
            "SELECT * FROM action_approvals WHERE state = ? ORDER BY created_at", (PENDING,)
        )
        return [_record(row) for row in rows]

    async def pending_in(self, conversation_id: str, kind: str) -> list[ActionApprovalRecord]:
        rows = await self._db.fetch_all(
            "SELECT * FROM action_approvals WHERE state = ? AND conversation_id = ? AND kind = ?"
            " ORDER BY created_at",
            (PENDING, conversation_id, kind),
        )
        return [_record(row) for row in rows]

    async def of_task(self, task_id: str) -> list[ActionApprovalRecord]:
        rows = await self._db.fetch_all(
            "SELECT * FROM action_approvals WHERE task_id = ? ORDER BY created_at", (task_id,)
        )
        return [_record(row) for row in rows]

    async def record_refusal(self, code: str, channel: str, who: str) -> None:
        await self._db.write(
            "INSERT INTO action_approval_refusals (code, channel, who, at) VALUES (?, ?, ?, ?)",
            (code, channel, who, time.time()),
        )

    async def refusals(self, code: str) -> list[tuple[str, str]]:
        rows = await self._db.fetch_all(
            "SELECT channel, who FROM action_approval_refusals WHERE code = ? ORDER BY at",
            (code,),
        )
        return [(row["channel"], row["who"]) for row in rows]

    async def add_rule(self, conversation_id: str, signature: str, added_by: str) -> None:
        await self._db.write(
            "INSERT INTO conversation_action_rules (conversation_id, signature, added_by,"
            " added_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (conversation_id, signature, added_by, time.time()),
        )

    async def rules(self, conversation_id: str) -> list[ConversationRule]:
        rows = await self._db.fetch_all(
            "SELECT signature, added_by, added_at FROM conversation_action_rules"
            " WHERE conversation_id = ? ORDER BY added_at",
            (conversation_id,),
        )
        return [
            ConversationRule(row["signature"], row["added_by"], row["added_at"]) for row in rows
        ]


def _record(row: Row) -> ActionApprovalRecord:
    context = row["card_context_json"]
    return ActionApprovalRecord(
        code=row["code"],
        conversation_id=row["conversation_id"],
        task_id=row["task_id"],
        kind=row["kind"],
        summary=row["summary"],
        details=row["details"],
        rule=row["rule"],
        signature=row["signature"],
        options=tuple(json.loads(row["options_json"])),
        requester_id=row["requester_id"],
        state=row["state"],
        card_channel=row["card_channel"],
        card_context=json.loads(context) if context is not None else None,
        card_ref=row["card_ref"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        decided_by=row["decided_by"],
        decided_at=row["decided_at"],
        reason=row["reason"],
        answer=row["answer"],
    )
