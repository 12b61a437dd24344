"""Context kept from messages that did not engage the bot (``accumulate`` rooms), handed to
the next message that does.

Its own small store on the shared database: accumulated context is not an approval, and
the core reaches it as ``store.context_lines`` through the ContextLineStore protocol.
"""

from __future__ import annotations

from gateway_bot.domain.records import ContextLine
from gateway_bot.state.database import Database


class SqlContextLines:
    def __init__(self, database: Database) -> None:
        self._database = database

    async def add(self, channel: str, key: str, line: ContextLine, keep: int) -> None:
        """Keep a non-engaging message as context; only the newest ``keep`` survive.
        No flush of its own: the message is durable as a task, and recovery routes it
        again (and keeps the line again) if a power cut took the line."""
        async with self._database.transaction(durable=False) as db:
            await db.execute(
                "INSERT INTO context_messages (channel, conversation_key, sender_name, body,"
                " received_at) VALUES (?, ?, ?, ?, ?)",
                (channel, key, line.sender_name, line.body, line.received_at),
            )
            await db.execute(
                "DELETE FROM context_messages WHERE channel = ? AND conversation_key = ? AND rowid"
                " NOT IN (SELECT rowid FROM context_messages WHERE channel = ? AND"
                " conversation_key = ? ORDER BY received_at DESC, rowid DESC LIMIT ?)",
                (channel, key, channel, key, keep),
            )

    async def take(self, channel: str, key: str) -> list[ContextLine]:
        """Return and forget the accumulated context, oldest first. Every engaging message
        asks, and most find nothing: a read alone then (no transaction, no write). The
        forgetting needs no flush of its own: the task carrying the lines is recorded
        after it (so a power cut that took one took both, and recovery takes them again)."""
        present = await self._database.fetch_one(
            "SELECT 1 FROM context_messages WHERE channel = ? AND conversation_key = ? LIMIT 1",
            (channel, key),
        )
        if present is None:
            return []
        async with self._database.transaction(durable=False) as db:
            rows = await db.fetch_all(
                "SELECT sender_name, body, received_at FROM context_messages"
                " WHERE channel = ? AND conversation_key = ? ORDER BY received_at, rowid",
                (channel, key),
            )
            lines = [ContextLine(r[0], r[1], r[2]) for r in rows]
            await db.execute(
                "DELETE FROM context_messages WHERE channel = ? AND conversation_key = ?",
                (channel, key),
            )
        return lines
