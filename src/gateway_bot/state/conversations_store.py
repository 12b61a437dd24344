"""A conversation's rows, the conversations half of ``SqlStore`` (``state/sql_store.py``).

Apart from the tasks' intake and lifecycle (sqlite_store.py had grown past 400 lines): which
conversation of a channel key is active, and what it keeps between tasks (model, agent
session, last reply, the next model or agent asked for). ``SqlStore`` inherits these, so its
callers still see one store (the ``Store`` protocol). The writes are committed
``durable=False``: each comes with a task whose durable reply record flushes it, or whose
recovery makes it again.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from gateway_bot.domain.records import ConversationRecord
from gateway_bot.state.database import Database
from gateway_bot.state.rows import conversation_from_row as _conversation_from_row


class SqlConversations:
    """The conversations table's queries; needs only the store's ``Database``."""

    _database: Database

    async def active_conversation(self, channel: str, key: str) -> ConversationRecord | None:
        row = await self._database.fetch_one(
            "SELECT * FROM conversations WHERE channel = ? AND channel_key = ? AND active = 1",
            (channel, key),
        )
        return _conversation_from_row(row) if row else None

    async def list_conversations(
        self, *, active: bool | None = None, channel: str | None = None, limit: int = 100
    ) -> list[ConversationRecord]:
        where: list[str] = []
        values: list[Any] = []
        if active is not None:
            where.append("active = ?")
            values.append(int(active))
        if channel is not None:
            where.append("channel = ?")
            values.append(channel)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = await self._database.fetch_all(
            f"SELECT * FROM conversations {clause} ORDER BY updated_at DESC, rowid DESC LIMIT ?",
            [*values, limit],
        )
        return [_conversation_from_row(row) for row in rows]

    async def get_conversation(self, conversation_id: str) -> ConversationRecord:
        row = await self._database.fetch_one(
            "SELECT * FROM conversations WHERE id = ?", (conversation_id,)
        )
        if row is None:
            raise KeyError(f"no conversation {conversation_id}")
        return _conversation_from_row(row)

    async def create_conversation(
        self, channel: str, key: str, model: str | None
    ) -> ConversationRecord:
        conversation_id = secrets.token_hex(4)
        now = time.time()
        # Routing makes it; the task's durable reply record flushes it (or recovery
        # re-routes the task and makes it again).
        async with self._database.transaction(durable=False) as db:
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
        return ConversationRecord(
            id=conversation_id, channel=channel, channel_key=key, model=model,
            agent_session_id=None, last_reply=None, next_model=None, active=True,
            created_at=now, updated_at=now, agent_backend=None, next_agent=None,
        )  # fmt: skip

    async def update_conversation(
        self,
        conversation_id: str,
        *,
        model: str | None = None,
        agent_session_id: str | None = None,
        clear_session: bool = False,
        last_reply: str | None = None,
        next_model: str | None = None,
        agent_backend: str | None = None,
        next_agent: str | None = None,
    ) -> ConversationRecord:
        sets = ["updated_at = ?"]
        values: list[Any] = [time.time()]
        for column, value in (
            ("model", model),
            ("agent_session_id", agent_session_id),
            ("last_reply", last_reply),
            ("next_model", next_model),
            ("agent_backend", agent_backend),
            ("next_agent", next_agent),
        ):
            if value is not None:
                sets.append(f"{column} = ?")
                values.append(value)
        if clear_session:
            sets.append("agent_session_id = NULL")
        # Written by a task's run or a command, whose durable reply record follows.
        await self._database.write(
            f"UPDATE conversations SET {', '.join(sets)} WHERE id = ?",
            [*values, conversation_id],
            durable=False,
        )
        return await self.get_conversation(conversation_id)
