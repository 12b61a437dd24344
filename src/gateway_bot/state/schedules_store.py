"""Schedules and their runs in the shared database (owner "schedules", tables
``schedules`` and ``schedule_runs``). One writer: the schedule runner and the /schedule
commands (``core/schedules/runner.py``).

A run is identified by (schedule id, due time). ``claim_run`` records it and moves the
schedule's next due time in one transaction, before anything is queued: a crash after it
finds the run recorded and only finishes queueing it (by the same message id, which the
core's intake drops as a duplicate), a crash before it finds the schedule still due. So a
due run becomes at most one task, whatever moment the daemon dies at.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from gateway_bot.domain.messages import InboundMessage
from gateway_bot.state.database import Database, Row
from gateway_bot.state.schedule_proposals_store import SqlScheduleProposals

OWNER = "schedules"

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE schedules (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        channel TEXT NOT NULL,
        conversation_key TEXT NOT NULL,
        kind TEXT NOT NULL,
        expression TEXT NOT NULL,
        timezone TEXT NOT NULL,
        prompt TEXT NOT NULL,
        creator_id TEXT NOT NULL,
        origin_json TEXT NOT NULL,
        state TEXT NOT NULL,
        next_due REAL,
        created_at REAL NOT NULL,
        failures_from REAL NOT NULL DEFAULT 0
    );
    CREATE INDEX schedules_due ON schedules (state, next_due);
    CREATE TABLE schedule_runs (
        schedule_id INTEGER NOT NULL,
        due_at REAL NOT NULL,
        state TEXT NOT NULL,
        message_id TEXT NOT NULL,
        task_id TEXT,
        recorded_at REAL NOT NULL,
        PRIMARY KEY (schedule_id, due_at)
    );
    CREATE UNIQUE INDEX schedule_runs_message ON schedule_runs (message_id);
    """,
)

ACTIVE = "active"
PAUSED = "paused"
REMOVED = "removed"
FINISHED = "finished"
"""A one-off whose run was claimed, or a rule with no run left."""

RUN_DUE = "due"
"""Recorded, its task not yet accepted: finished at the next tick or start."""
RUN_QUEUED = "queued"
RUN_MISSED = "missed"


@dataclass(frozen=True)
class ScheduleRecord:
    id: int
    channel: str
    conversation_key: str
    kind: str
    expression: str
    timezone: str
    prompt: str
    creator_id: str
    origin: InboundMessage
    """The /schedule message: where runs are posted and as whom they run."""
    state: str
    next_due: float | None
    created_at: float


@dataclass(frozen=True)
class RunRecord:
    schedule_id: int
    due_at: float
    state: str
    message_id: str
    task_id: str | None


RUN_MESSAGE_PREFIX = "gateway-bot-schedule|"


def run_message_id(schedule_id: int, due_at: float) -> str:
    """The run's message id in the core's intake; no channel makes ids of this shape."""
    return f"{RUN_MESSAGE_PREFIX}{schedule_id}|{int(due_at)}"


KEPT_RUNS = 3
"""Runs per schedule that retention never removes: the failure streak reads them."""


class SqlSchedules:
    def __init__(self, database: Database) -> None:
        self._db = database
        database.add_pruner(OWNER, self.prune)
        self.proposals = SqlScheduleProposals(database)
        """Schedules the agent proposed, waiting for a decision (their own owner)."""

    async def prune(self, before: float) -> int:
        """Retention: runs recorded before ``before`` go, except each schedule's latest
        ``KEPT_RUNS`` and any not yet queued. Schedules themselves stay (a few rows)."""
        return await self._db.write(
            "DELETE FROM schedule_runs WHERE recorded_at < ? AND state != ?"
            " AND rowid NOT IN (SELECT kept.rowid FROM schedule_runs AS kept"
            " WHERE kept.schedule_id = schedule_runs.schedule_id"
            " ORDER BY kept.due_at DESC LIMIT ?)",
            (before, RUN_DUE, KEPT_RUNS),
        )

    async def open(self) -> None:
        """Migrate (idempotent); the core's store has opened the database."""
        await self._db.migrate(OWNER, MIGRATIONS)
        await self.proposals.open()

    async def create(
        self,
        origin: InboundMessage,
        kind: str,
        expression: str,
        timezone: str,
        prompt: str,
        next_due: float,
        limit: int,
    ) -> ScheduleRecord | None:
        """Save a schedule unless its conversation already has ``limit`` (None then): the
        count and the insert in one transaction, so two /schedule at once cannot pass it."""
        async with self._db.transaction() as db:
            row = await db.fetch_one(
                "SELECT COUNT(*) FROM schedules WHERE channel = ? AND conversation_key = ?"
                " AND state IN (?, ?)",
                (origin.channel, origin.conversation_key, ACTIVE, PAUSED),
            )
            if row is not None and int(row[0]) >= limit:
                return None
            inserted = await db.fetch_one(
                "INSERT INTO schedules (channel, conversation_key, kind, expression, timezone,"
                " prompt, creator_id, origin_json, state, next_due, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (
                    origin.channel,
                    origin.conversation_key,
                    kind,
                    expression,
                    timezone,
                    prompt,
                    origin.sender_id,
                    json.dumps(origin.to_json()),
                    ACTIVE,
                    next_due,
                    time.time(),
                ),
            )
            assert inserted is not None
            schedule_id = int(inserted[0])
        found = await self.get(schedule_id)
        assert found is not None
        return found

    async def get(self, schedule_id: int) -> ScheduleRecord | None:
        row = await self._db.fetch_one("SELECT * FROM schedules WHERE id = ?", (schedule_id,))
        return _schedule(row) if row is not None else None

    async def in_conversation(self, channel: str, key: str) -> list[ScheduleRecord]:
        rows = await self._db.fetch_all(
            "SELECT * FROM schedules WHERE channel = ? AND conversation_key = ?"
            " AND state IN (?, ?) ORDER BY id",
            (channel, key, ACTIVE, PAUSED),
        )
        return [_schedule(row) for row in rows]

    async def listed(self) -> list[ScheduleRecord]:
        """Every schedule not removed or finished, for ``status`` and the dashboard. Reads
        only (``status`` opens the database read-only): none before the first migration."""
        if await self._db.schema_version(OWNER) is None:
            return []
        rows = await self._db.fetch_all(
            "SELECT * FROM schedules WHERE state IN (?, ?) ORDER BY id", (ACTIVE, PAUSED)
        )
        return [_schedule(row) for row in rows]

    async def due(self, now: float) -> list[ScheduleRecord]:
        rows = await self._db.fetch_all(
            "SELECT * FROM schedules WHERE state = ? AND next_due <= ? ORDER BY next_due, id",
            (ACTIVE, now),
        )
        return [_schedule(row) for row in rows]

    async def earliest_due(self) -> float | None:
        row = await self._db.fetch_one(
            "SELECT MIN(next_due) FROM schedules WHERE state = ?", (ACTIVE,)
        )
        return float(row[0]) if row is not None and row[0] is not None else None

    async def set_state(self, schedule_id: int, state: str, next_due: float | None) -> None:
        await self._db.write(
            "UPDATE schedules SET state = ?, next_due = ? WHERE id = ?",
            (state, next_due, schedule_id),
        )

    async def resume(self, schedule_id: int, next_due: float, now: float) -> None:
        """Active again from ``next_due``; earlier failed runs no longer count."""
        await self._db.write(
            "UPDATE schedules SET state = ?, next_due = ?, failures_from = ? WHERE id = ?",
            (ACTIVE, next_due, now, schedule_id),
        )

    async def claim_run(
        self,
        schedule: ScheduleRecord,
        due_at: float,
        run_state: str,
        next_due: float | None,
    ) -> bool:
        """Record the run at ``due_at`` (``RUN_DUE``, or ``RUN_MISSED`` when too late) and
        move the schedule to ``next_due`` (None: finished), only if the schedule still stands
        where it was read; False when another claim or a /pause got there first."""
        state = ACTIVE if next_due is not None else FINISHED
        now = time.time()
        async with self._db.transaction() as db:
            moved = await db.execute(
                "UPDATE schedules SET next_due = ?, state = ?"
                " WHERE id = ? AND state = ? AND next_due = ?",
                (next_due, state, schedule.id, ACTIVE, schedule.next_due),
            )
            if moved != 1:
                return False
            await db.execute(
                "INSERT INTO schedule_runs (schedule_id, due_at, state, message_id, recorded_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (schedule.id, due_at, run_state, run_message_id(schedule.id, due_at), now),
            )
        return True

    async def mark_queued(self, schedule_id: int, due_at: float, task_id: str) -> None:
        await self._db.write(
            "UPDATE schedule_runs SET state = ?, task_id = ? WHERE schedule_id = ? AND due_at = ?",
            (RUN_QUEUED, task_id, schedule_id, due_at),
        )

    async def unqueued_runs(self) -> list[RunRecord]:
        rows = await self._db.fetch_all(
            "SELECT * FROM schedule_runs WHERE state = ? ORDER BY due_at", (RUN_DUE,)
        )
        return [_run(row) for row in rows]

    async def run_by_message(self, message_id: str) -> RunRecord | None:
        row = await self._db.fetch_one(
            "SELECT * FROM schedule_runs WHERE message_id = ?", (message_id,)
        )
        return _run(row) if row is not None else None

    async def latest_queued(self, schedule_id: int, count: int) -> list[RunRecord]:
        """The ``count`` latest runs that became tasks since the schedule was last resumed
        (a resume starts a new count of failures), newest first."""
        rows = await self._db.fetch_all(
            "SELECT r.* FROM schedule_runs r JOIN schedules s ON s.id = r.schedule_id"
            " WHERE r.schedule_id = ? AND r.state = ? AND r.due_at >= s.failures_from"
            " ORDER BY r.due_at DESC LIMIT ?",
            (schedule_id, RUN_QUEUED, count),
        )
        return [_run(row) for row in rows]

    async def runs(self, schedule_id: int) -> list[RunRecord]:
        rows = await self._db.fetch_all(
            "SELECT * FROM schedule_runs WHERE schedule_id = ? ORDER BY due_at", (schedule_id,)
        )
        return [_run(row) for row in rows]


def _schedule(row: Row) -> ScheduleRecord:
    origin: dict[str, Any] = json.loads(row["origin_json"])
    return ScheduleRecord(
        id=int(row["id"]),
        channel=row["channel"],
        conversation_key=row["conversation_key"],
        kind=row["kind"],
        expression=row["expression"],
        timezone=row["timezone"],
        prompt=row["prompt"],
        creator_id=row["creator_id"],
        origin=InboundMessage.from_json(origin),
        state=row["state"],
        next_due=row["next_due"],
        created_at=row["created_at"],
    )


def _run(row: Row) -> RunRecord:
    return RunRecord(
        schedule_id=int(row["schedule_id"]),
        due_at=float(row["due_at"]),
        state=row["state"],
        message_id=row["message_id"],
        task_id=row["task_id"],
    )
