"""The dashboard's lists over the core's tables, a part of ``SqlStore``: a page of tasks
matching filters (state, channel, sender, dates, words of the message), a page of
conversations with their task count, cost, last activity and newest message, and the
totals the overview shows. They only read.

Built to stay fast with 100,000 tasks (``bench/dashboard_lists.py``):

- A page of tasks is read newest first in the order of an index (migration 9:
  ``(kind, created_at, ...)``, or ``(kind, channel, created_at)`` when a channel is
  chosen; tasks not yet completed, which are few, by the state index: ``newest_first``), and
  the next page starts after the last row's ``(created_at, rowid)`` (keyset pagination): a
  page costs its own rows, however deep it is, and a task added meanwhile neither repeats
  nor hides one.
- A sender or words to find are looked up in the stored message's JSON text with ``LIKE``
  over the whole table once (a set of rowids), then checked exactly on the message's
  fields for the rows of the page: walking the date index and reading each row's JSON
  costs three times that when few rows match. The JSON text is matched as json.dumps wrote
  it, so the term is written the same way (non-ASCII as ``\\uXXXX``) before it is looked
  for. Letters match in either case (ASCII on SQLite, where LIKE knows no more; ILIKE on
  PostgreSQL).
- Conversations (thousands, not hundreds of thousands) are sorted by their last activity
  with offsets; their figures come from the ``(conversation_id, kind, created_at,
  cost_usd)`` index alone.
- The overview's totals read the columns the wide date index holds (no row), and a run-time
  percentile two ranks of the sorted run times.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from gateway_bot.domain.lifecycle import CompletionReason, TaskKind, TaskState
from gateway_bot.domain.records import ConversationRecord, TaskRecord
from gateway_bot.state.database import Database
from gateway_bot.state.rows import conversation_from_row, task_from_row
from gateway_bot.state.task_views import newest_first

Cursor = tuple[float, int]
"""Where a page of tasks ended: the last row's ``created_at`` and ``rowid``."""


@dataclass(frozen=True)
class TaskFilter:
    """Which tasks a list shows; every field left empty matches every task."""

    kind: TaskKind | None = TaskKind.AGENT
    states: tuple[TaskState, ...] = ()
    reasons: tuple[CompletionReason, ...] = ()
    """With ``states``: a task in one of ``states``, or completed with one of these."""
    channel: str = ""
    sender: str = ""
    """A sender's id or display name, whole (letters in either case)."""
    since: float | None = None
    until: float | None = None
    """Accepted at or after ``since``, before ``until``."""
    words: str = ""
    """Text the message's body contains."""
    conversation_id: str = ""


@dataclass(frozen=True)
class TaskPage:
    tasks: tuple[TaskRecord, ...]
    """Newest first."""
    next: Cursor | None
    """Where the next (older) page starts; None on the last page."""


@dataclass(frozen=True)
class ConversationFilter:
    channel: str = ""
    active: bool | None = None
    sender: str = ""
    """Conversations where this sender wrote (id or display name, whole)."""
    since: float | None = None
    until: float | None = None
    """Last active at or after ``since``, before ``until``."""
    words: str = ""
    """Conversations with a message whose body contains this text."""


@dataclass(frozen=True)
class ConversationSummary:
    conversation: ConversationRecord
    tasks: int
    """Its agent tasks."""
    cost_usd: float
    last_activity: float
    """Its newest task's arrival or its last update, whichever is later."""
    last_message: TaskRecord | None
    """Its newest agent task."""


@dataclass(frozen=True)
class TaskTotal:
    state: TaskState
    reason: CompletionReason | None
    count: int
    cost_usd: float


def _like_escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _as_stored(text: str) -> str:
    """``text`` as it appears inside the stored JSON's strings (json.dumps' escapes)."""
    return json.dumps(text)[1:-1]


class SqlTaskLists:
    """Needs only the store's ``Database``."""

    _database: Database

    # -- dialect -------------------------------------------------------------------------

    def _field(self, name: str) -> str:
        """The parsed message's ``name`` (a JSON string field) as SQL text."""
        if self._database.dialect == "postgresql":
            return f"(parsed_json::json ->> '{name}')"
        return f"json_extract(parsed_json, '$.{name}')"

    @property
    def _like(self) -> str:
        return "ILIKE" if self._database.dialect == "postgresql" else "LIKE"

    def _json_has(self, text: str, values: list[Any]) -> str:
        """A cheap condition true for every row whose parsed JSON could hold ``text``."""
        values.append(f"%{_like_escaped(_as_stored(text))}%")
        return f"parsed_json {self._like} ? ESCAPE '\\'"

    def _text_conditions(self, sender: str, words: str, values: list[Any]) -> list[str]:
        """The exact checks on the message's fields."""
        where = []
        if sender:
            where.append(
                f"(LOWER({self._field('sender_id')}) = LOWER(CAST(? AS TEXT))"
                f" OR LOWER({self._field('sender_name')}) = LOWER(CAST(? AS TEXT)))"
            )
            values += [sender, sender]
        if words:
            where.append(f"{self._field('body')} {self._like} ? ESCAPE '\\'")
            values.append(f"%{_like_escaped(words)}%")
        return where

    # -- tasks ---------------------------------------------------------------------------

    async def task_page(
        self, which: TaskFilter, *, after: Cursor | None = None, limit: int = 50
    ) -> TaskPage:
        """The newest ``limit`` tasks matching ``which`` older than ``after``."""
        where: list[str] = []
        values: list[Any] = []
        if which.kind is not None:
            where.append("kind = ?")
            values.append(which.kind.value)
        if which.channel:
            where.append("channel = ?")
            values.append(which.channel)
        if which.states or which.reasons:
            either = []
            if which.states:
                either.append(f"state IN ({','.join('?' * len(which.states))})")
                values += [s.value for s in which.states]
            if which.reasons:
                either.append(
                    f"(state = 'completed' AND completion_reason IN"
                    f" ({','.join('?' * len(which.reasons))}))"
                )
                values += [r.value for r in which.reasons]
            where.append(f"({' OR '.join(either)})")
        if which.conversation_id:
            where.append("conversation_id = ?")
            values.append(which.conversation_id)
        if which.since is not None:
            where.append("created_at >= ?")
            values.append(which.since)
        if which.until is not None:
            where.append("created_at < ?")
            values.append(which.until)
        if after is not None:
            where.append("(created_at < ? OR (created_at = ? AND rowid < ?))")
            values += [after[0], after[0], after[1]]
        if which.sender or which.words:
            # The set of candidates first (one pass), then the exact check on the page's rows.
            could = [self._json_has(text, values) for text in (which.sender, which.words) if text]
            where.append(f"rowid IN (SELECT rowid FROM tasks WHERE {' AND '.join(could)})")
            where += self._text_conditions(which.sender, which.words, values)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        unfinished = which.states if which.states and not which.reasons else None
        rows = await self._database.fetch_all(
            f"SELECT rowid AS n, * FROM tasks {clause} ORDER BY {newest_first(unfinished)} LIMIT ?",
            [*values, limit + 1],
        )
        shown = rows[:limit]
        following = None
        if len(rows) > limit:
            following = (float(shown[-1]["created_at"]), int(shown[-1]["n"]))
        return TaskPage(tuple(task_from_row(row) for row in shown), following)

    async def task_totals(self, since: float, kind: TaskKind = TaskKind.AGENT) -> list[TaskTotal]:
        """Tasks accepted since ``since`` per state and completion reason, with their cost."""
        rows = await self._database.fetch_all(
            "SELECT state, completion_reason, COUNT(*) AS n, COALESCE(SUM(cost_usd), 0) AS cost"
            " FROM tasks WHERE kind = ? AND created_at >= ? GROUP BY state, completion_reason",
            [kind.value, since],
        )
        return [
            TaskTotal(
                TaskState(row["state"]),
                CompletionReason(row["completion_reason"]) if row["completion_reason"] else None,
                int(row["n"]),
                float(row["cost"]),
            )
            for row in rows
        ]

    async def run_time_percentiles(
        self, since: float, percentiles: tuple[float, ...], kind: TaskKind = TaskKind.AGENT
    ) -> list[float | None]:
        """The given percentiles (0-100) of how long the tasks accepted since ``since`` ran
        (start to end), interpolated between the two nearest ranks; None when none ran.
        Read as two ranks each from the sorted run times, not every run time."""
        ran = "completed_at - started_at"
        where = (
            "kind = ? AND created_at >= ? AND started_at IS NOT NULL AND completed_at IS NOT NULL"
        )
        row = await self._database.fetch_one(
            f"SELECT COUNT(*) FROM tasks WHERE {where}", [kind.value, since]
        )
        count = int(row[0]) if row is not None else 0
        found: list[float | None] = []
        for q in percentiles:
            if not count:
                found.append(None)
                continue
            at = (count - 1) * q / 100
            low = math.floor(at)
            rows = await self._database.fetch_all(
                f"SELECT {ran} AS ran FROM tasks WHERE {where} ORDER BY ran LIMIT 2 OFFSET ?",
                [kind.value, since, low],
            )
            values = [max(0.0, float(r["ran"])) for r in rows]
            high = values[1] if len(values) > 1 else values[0]
            found.append(values[0] + (high - values[0]) * (at - low))
        return found

    # -- conversations -------------------------------------------------------------------

    async def conversation_page(
        self, which: ConversationFilter, *, offset: int = 0, limit: int = 50
    ) -> tuple[list[ConversationSummary], bool]:
        """Most recently active first; and whether more follow."""
        agent = TaskKind.AGENT.value
        latest = "GREATEST" if self._database.dialect == "postgresql" else "MAX"
        where: list[str] = []
        values: list[Any] = []
        if which.channel:
            where.append("c.channel = ?")
            values.append(which.channel)
        if which.active is not None:
            where.append("c.active = ?")
            values.append(1 if which.active else 0)
        if which.sender or which.words:
            found = [self._json_has(text, values) for text in (which.sender, which.words) if text]
            found += self._text_conditions(which.sender, which.words, values)
            where.append(f"c.id IN (SELECT conversation_id FROM tasks WHERE {' AND '.join(found)})")
        outer: list[str] = []
        if which.since is not None:
            outer.append("last_activity >= ?")
            values.append(which.since)
        if which.until is not None:
            outer.append("last_activity < ?")
            values.append(which.until)
        inner = f"WHERE {' AND '.join(where)}" if where else ""
        having = f"WHERE {' AND '.join(outer)}" if outer else ""
        rows = await self._database.fetch_all(
            "SELECT page.*, (SELECT t.rowid FROM tasks t WHERE t.conversation_id = page.id"
            "  AND t.kind = ? ORDER BY t.created_at DESC, t.rowid DESC LIMIT 1) AS newest"
            " FROM (SELECT * FROM (SELECT c.*, c.rowid AS n,"
            "  (SELECT COUNT(*) FROM tasks t WHERE t.conversation_id = c.id AND t.kind = ?)"
            "   AS task_count,"
            "  (SELECT COALESCE(SUM(t.cost_usd), 0) FROM tasks t"
            "   WHERE t.conversation_id = c.id AND t.kind = ?) AS total_cost,"
            f"  {latest}(c.updated_at, COALESCE((SELECT MAX(t.created_at) FROM tasks t"
            "   WHERE t.conversation_id = c.id AND t.kind = ?), c.updated_at)) AS last_activity"
            f"  FROM conversations c {inner}) AS summed {having}"
            "  ORDER BY last_activity DESC, n DESC LIMIT ? OFFSET ?) AS page"
            " ORDER BY last_activity DESC, n DESC",
            [agent, agent, agent, agent, *values, limit + 1, offset],
        )
        newest = [int(row["newest"]) for row in rows[:limit] if row["newest"] is not None]
        messages: dict[int, TaskRecord] = {}
        if newest:
            newest_rows = await self._database.fetch_all(
                f"SELECT rowid AS n, * FROM tasks WHERE rowid IN ({','.join('?' * len(newest))})",
                newest,
            )
            messages = {int(row["n"]): task_from_row(row) for row in newest_rows}
        summaries = [
            ConversationSummary(
                conversation_from_row(row),
                int(row["task_count"]),
                float(row["total_cost"]),
                float(row["last_activity"]),
                messages.get(int(row["newest"])) if row["newest"] is not None else None,
            )
            for row in rows[:limit]
        ]
        return summaries, len(rows) > limit
