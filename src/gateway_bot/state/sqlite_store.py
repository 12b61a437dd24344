"""SQLite implementation of the Store: WAL mode, one connection, one writer.

aiosqlite runs the blocking sqlite3 calls on its own thread, so the event loop never waits
on disk. Every write commits before returning: "accepted" means "on disk".
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import aiosqlite

from gateway_bot.domain.lifecycle import CompletionReason, TaskState, check_transition
from gateway_bot.domain.messages import InboundMessage, RawMessage, Reply, Usage
from gateway_bot.domain.records import ConversationRecord, TaskRecord
from gateway_bot.state.approvals import SqliteApprovals
from gateway_bot.state.database import Database
from gateway_bot.state.migrations import MIGRATIONS


class SqliteStore:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._database = Database()
        self.approvals = SqliteApprovals(self._database)

    @property
    def db(self) -> aiosqlite.Connection:
        return self._database.connection

    async def open(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        connection = await aiosqlite.connect(self._path, isolation_level=None)
        connection.row_factory = aiosqlite.Row
        self._database.attach(connection)
        await connection.execute("PRAGMA journal_mode=WAL")
        await connection.execute("PRAGMA synchronous=FULL")
        await connection.execute("PRAGMA foreign_keys=ON")
        await connection.execute("PRAGMA busy_timeout=5000")
        try:
            await self._migrate()
        except BaseException:
            await self.close()
            raise

    async def _migrate(self) -> None:
        async with self.db.execute("PRAGMA user_version") as cursor:
            row = await cursor.fetchone()
        version = int(row[0]) if row else 0
        if version > len(MIGRATIONS):
            raise RuntimeError(
                f"state database {self._path} has schema version {version}, newer than this "
                f"gateway-bot ({len(MIGRATIONS)}): upgrade gateway-bot"
            )
        for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
            await self.db.executescript(f"BEGIN;\n{script}\nPRAGMA user_version={number};\nCOMMIT;")

    async def close(self) -> None:
        try:
            connection = self._database.connection
        except RuntimeError:
            return
        self._database.attach(None)
        await connection.close()

    # -- tasks -------------------------------------------------------------------------

    async def accept_inbound(self, raw: RawMessage) -> tuple[str, bool]:
        async with self._database.transaction() as db:
            async with db.execute(
                "SELECT task_id FROM inbound_messages WHERE channel = ? AND message_id = ?",
                (raw.channel, raw.message_id),
            ) as cursor:
                existing = await cursor.fetchone()
            if existing is not None:
                return str(existing[0]), False
            task_id = secrets.token_hex(6)
            now = time.time()
            await db.execute(
                "INSERT INTO tasks (id, channel, message_id, state, raw_json, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    task_id,
                    raw.channel,
                    raw.message_id,
                    TaskState.QUEUED.value,
                    json.dumps(raw.to_json()),
                    now,
                ),
            )
            await db.execute(
                "INSERT INTO inbound_messages (channel, message_id, task_id, received_at)"
                " VALUES (?, ?, ?, ?)",
                (raw.channel, raw.message_id, task_id, raw.received_at),
            )
        return task_id, True

    async def get_task(self, task_id: str) -> TaskRecord:
        async with self.db.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)) as cursor:
            row = await cursor.fetchone()
        if row is None:
            raise KeyError(f"no task {task_id}")
        return _task_from_row(row)

    async def tasks_in_states(self, states: Iterable[TaskState]) -> list[TaskRecord]:
        values = [s.value for s in states]
        marks = ",".join("?" * len(values))
        async with self.db.execute(
            f"SELECT * FROM tasks WHERE state IN ({marks}) ORDER BY created_at, rowid", values
        ) as cursor:
            return [_task_from_row(row) for row in await cursor.fetchall()]

    async def conversation_tasks(
        self, conversation_id: str, states: Iterable[TaskState]
    ) -> list[TaskRecord]:
        values = [s.value for s in states]
        marks = ",".join("?" * len(values))
        async with self.db.execute(
            f"SELECT * FROM tasks WHERE conversation_id = ? AND state IN ({marks})"
            " ORDER BY created_at, rowid",
            [conversation_id, *values],
        ) as cursor:
            return [_task_from_row(row) for row in await cursor.fetchall()]

    async def transition(
        self,
        task_id: str,
        target: TaskState,
        *,
        reason: CompletionReason | None = None,
        conversation_id: str | None = None,
        parsed: InboundMessage | None = None,
        error: str | None = None,
    ) -> TaskRecord:
        current = await self.get_task(task_id)
        check_transition(current.state, target)
        if (target is TaskState.COMPLETED) != (reason is not None):
            raise ValueError("a completion reason is required exactly when completing")
        sets = ["state = ?"]
        values: list[Any] = [target.value]
        if reason is not None:
            sets += ["completion_reason = ?", "completed_at = ?"]
            values += [reason.value, time.time()]
        if target is TaskState.EXECUTING:
            sets += ["started_at = ?", "attempts = attempts + 1"]
            values.append(time.time())
        if conversation_id is not None:
            sets.append("conversation_id = ?")
            values.append(conversation_id)
        if parsed is not None:
            sets.append("parsed_json = ?")
            values.append(json.dumps(parsed.to_json()))
        if error is not None:
            sets.append("error = ?")
            values.append(error)
        await self._database.write(
            f"UPDATE tasks SET {', '.join(sets)} WHERE id = ?", [*values, task_id]
        )
        return await self.get_task(task_id)

    async def save_parsed(self, task_id: str, parsed: InboundMessage) -> None:
        await self._database.write(
            "UPDATE tasks SET parsed_json = ? WHERE id = ?",
            (json.dumps(parsed.to_json()), task_id),
        )

    async def record_reply(self, task_id: str, reply: Reply) -> None:
        await self._database.write(
            "UPDATE tasks SET reply_json = ? WHERE id = ?",
            (json.dumps(reply.to_json()), task_id),
        )

    async def mark_reply_delivered(self, task_id: str) -> None:
        await self._database.write(
            "UPDATE tasks SET reply_delivered = 1, delivery_error = NULL WHERE id = ?", (task_id,)
        )

    async def record_delivery_failure(self, task_id: str, error: str) -> None:
        await self._database.write(
            "UPDATE tasks SET delivery_error = ? WHERE id = ?", (error, task_id)
        )

    async def record_usage(self, task_id: str, usage: Usage) -> None:
        await self._database.write(
            "UPDATE tasks SET cost_usd = ?, num_turns = ? WHERE id = ?",
            (usage.cost_usd, usage.num_turns, task_id),
        )

    # -- conversations -----------------------------------------------------------------

    async def active_conversation(self, channel: str, key: str) -> ConversationRecord | None:
        async with self.db.execute(
            "SELECT * FROM conversations WHERE channel = ? AND channel_key = ? AND active = 1",
            (channel, key),
        ) as cursor:
            row = await cursor.fetchone()
        return _conversation_from_row(row) if row else None

    async def get_conversation(self, conversation_id: str) -> ConversationRecord:
        async with self.db.execute(
            "SELECT * FROM conversations WHERE id = ?", (conversation_id,)
        ) as cursor:
            row = await cursor.fetchone()
        if row is None:
            raise KeyError(f"no conversation {conversation_id}")
        return _conversation_from_row(row)

    async def create_conversation(
        self, channel: str, key: str, model: str | None
    ) -> ConversationRecord:
        conversation_id = secrets.token_hex(4)
        now = time.time()
        async with self._database.transaction() as db:
            await db.execute(
                "UPDATE conversations SET active = 0, updated_at = ?"
                " WHERE channel = ? AND channel_key = ? AND active = 1",
                (now, channel, key),
            )
            await db.execute(
                "INSERT INTO conversations (id, channel, channel_key, model, active,"
                " created_at, updated_at) VALUES (?, ?, ?, ?, 1, ?, ?)",
                (conversation_id, channel, key, model, now, now),
            )
        return await self.get_conversation(conversation_id)

    async def update_conversation(
        self,
        conversation_id: str,
        *,
        model: str | None = None,
        agent_session_id: str | None = None,
        clear_session: bool = False,
        last_reply: str | None = None,
        next_model: str | None = None,
    ) -> ConversationRecord:
        sets = ["updated_at = ?"]
        values: list[Any] = [time.time()]
        for column, value in (
            ("model", model),
            ("agent_session_id", agent_session_id),
            ("last_reply", last_reply),
            ("next_model", next_model),
        ):
            if value is not None:
                sets.append(f"{column} = ?")
                values.append(value)
        if clear_session:
            sets.append("agent_session_id = NULL")
        await self._database.write(
            f"UPDATE conversations SET {', '.join(sets)} WHERE id = ?",
            [*values, conversation_id],
        )
        return await self.get_conversation(conversation_id)


def _task_from_row(row: aiosqlite.Row) -> TaskRecord:
    return TaskRecord(
        id=row["id"],
        channel=row["channel"],
        message_id=row["message_id"],
        conversation_id=row["conversation_id"],
        state=TaskState(row["state"]),
        completion_reason=(
            CompletionReason(row["completion_reason"]) if row["completion_reason"] else None
        ),
        raw=RawMessage.from_json(json.loads(row["raw_json"])),
        parsed=(
            InboundMessage.from_json(json.loads(row["parsed_json"])) if row["parsed_json"] else None
        ),
        reply=Reply.from_json(json.loads(row["reply_json"])) if row["reply_json"] else None,
        reply_delivered=bool(row["reply_delivered"]),
        created_at=row["created_at"],
        started_at=row["started_at"],
        completed_at=row["completed_at"],
        cost_usd=row["cost_usd"],
        num_turns=row["num_turns"],
        error=row["error"],
        attempts=row["attempts"],
        delivery_error=row["delivery_error"],
    )


def _conversation_from_row(row: aiosqlite.Row) -> ConversationRecord:
    return ConversationRecord(
        id=row["id"],
        channel=row["channel"],
        channel_key=row["channel_key"],
        model=row["model"],
        agent_session_id=row["agent_session_id"],
        last_reply=row["last_reply"],
        next_model=row["next_model"],
        active=bool(row["active"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )
