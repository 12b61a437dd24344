"""The listings and counts over the core's tables, a part of ``SqlStore``
(``state/sql_store.py``): the newest tasks matching filters (status, dashboard, the
executor's budget check), the approvals waiting for an owner, and the task counts the
metrics show. Each can keep to one kind (``TaskKind``): an operator's lists and charts count
agent tasks, and commands apart.

Apart from the tasks' intake and lifecycle (sqlite_store.py had grown past 400 lines): these
only read, and change no task. ``SqlStore`` inherits them, so callers still see one store
(the ``Store`` protocol).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gateway_bot.domain.lifecycle import CompletionReason, TaskKind, TaskState
from gateway_bot.domain.records import ApprovalRecord, TaskRecord
from gateway_bot.state.approvals_store import _approval as _approval_from_row
from gateway_bot.state.database import Database
from gateway_bot.state.rows import task_from_row as _task_from_row


def newest_first(states: Iterable[TaskState] | None) -> str:
    """The ORDER BY of a newest-first listing. Tasks not yet completed are few: found by
    the state index and sorted, they cost their own number; read along the date index
    instead (which SQLite, with no statistics, prefers for the order), they would cost every
    completed task (140 ms at 100,000, bench/dashboard_lists.py). Completed tasks are the
    bulk, read along the date index and stopped after the page."""
    if states is not None and TaskState.COMPLETED not in states:
        return "created_at + 0 DESC, rowid DESC"  # an expression: no index gives its order
    return "created_at DESC, rowid DESC"


class SqlTaskViews:
    """Listings and counts that only read; needs only the store's ``Database``."""

    _database: Database

    async def list_tasks(
        self,
        *,
        states: Iterable[TaskState] | None = None,
        conversation_id: str | None = None,
        limit: int = 100,
        kind: TaskKind | None = None,
    ) -> list[TaskRecord]:
        where: list[str] = []
        values: list[Any] = []
        if kind is not None:
            where.append("kind = ?")
            values.append(kind.value)
        if states is not None:
            states = list(states)
            names = [s.value for s in states]
            where.append(f"state IN ({','.join('?' * len(names))})")
            values += names
        if conversation_id is not None:
            where.append("conversation_id = ?")
            values.append(conversation_id)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = await self._database.fetch_all(
            f"SELECT * FROM (SELECT rowid AS n, * FROM tasks {clause}"
            f" ORDER BY {newest_first(states)} LIMIT ?) AS newest ORDER BY created_at, n",
            [*values, limit],
        )
        return [_task_from_row(row) for row in rows]

    async def pending_approvals(self) -> list[ApprovalRecord]:
        rows = await self._database.fetch_all(
            "SELECT * FROM approvals WHERE state = 'pending' ORDER BY created_at, rowid"
        )
        return [_approval_from_row(row) for row in rows]

    async def count_tasks(
        self, kind: TaskKind = TaskKind.AGENT
    ) -> dict[tuple[TaskState, CompletionReason | None], int]:
        rows = await self._database.fetch_all(
            "SELECT state, completion_reason, COUNT(*) FROM tasks WHERE kind = ?"
            " GROUP BY state, completion_reason",
            [kind.value],
        )
        return {
            (TaskState(state), CompletionReason(reason) if reason else None): int(count)
            for state, reason, count in rows
        }
