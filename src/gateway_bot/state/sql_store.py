"""The Store on the shared state database, SQLite or PostgreSQL (``state/database.py``).

Every write commits before returning, so everything survives the process's death (kill
-9). Two writes also wait for the disk (a flush shared with concurrent writers,
``state/group_flush``), because an effect outside follows them: ``accept_inbound`` (the
channel then acknowledges or deletes the message at its source) and ``record_reply`` (the
reply is then sent; after a power cut it is re-sent, never recomputed). The task's states
and the rows written with it (its conversation, usage, delivered mark) are committed
``durable=False`` (decision 0098): recovery rebuilds them from those two, and the engine's log
keeps a prefix of the commits, so the next flush (one of those two, or a background one
within ``group_flush.RELAXED_FLUSH_S``) puts them on disk too. A power cut in that window
can at worst repeat a step (re-route a message, re-run an interrupted task, re-send the
stored reply), never lose an accepted message. The SQL is portable: the engine is chosen
by what ``open`` is given (a file's path or a ``postgresql://`` URL).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import secrets
import time
from collections.abc import Iterable
from typing import Any

from gateway_bot.domain.lifecycle import CompletionReason, TaskKind, TaskState, check_transition
from gateway_bot.domain.messages import InboundMessage, RawMessage, Reply, Usage
from gateway_bot.domain.records import TaskRecord
from gateway_bot.state.approvals_store import SqlApprovals
from gateway_bot.state.context_lines import SqlContextLines
from gateway_bot.state.conversations_store import SqlConversations
from gateway_bot.state.database import Database, SchemaTooNew, StateTarget
from gateway_bot.state.migrations import MIGRATIONS, OWNER
from gateway_bot.state.rows import task_from_row as _task_from_row
from gateway_bot.state.rows import without_payload as _without_payload
from gateway_bot.state.store import OnCommitted, TransitionListener
from gateway_bot.state.task_lists import SqlTaskLists
from gateway_bot.state.task_views import SqlTaskViews

log = logging.getLogger(__name__)


class SqlStore(SqlConversations, SqlTaskViews, SqlTaskLists):
    """Opening and migrating, and the tasks from intake to their reply; a conversation's
    rows (``state/conversations_store``), the listings and counts that only read
    (``state/task_views``) and the dashboard's lists (``state/task_lists``) are inherited."""

    def __init__(self, target: StateTarget, database: Database | None = None) -> None:
        """``target``: a SQLite file's path or a ``postgresql://`` URL. ``database``: the
        one the channels' stores share (the daemon passes it); this store opens and closes
        it, and registers the core's pruning on it."""
        self._target = target
        self._database = database if database is not None else Database()
        self._database.add_pruner(OWNER, self.prune_payloads)
        self.approvals = SqlApprovals(self._database)
        self.context_lines = SqlContextLines(self._database)
        self._transition_listeners: list[TransitionListener] = []

    @property
    def database(self) -> Database:
        return self._database

    async def open(self) -> None:
        await self._database.open(self._target)
        try:
            await self._migrate()
        except BaseException:
            await self.close()
            raise

    async def open_read_only(self) -> None:
        """Open for reading only (``gateway-bot status`` beside a running daemon): no
        migration, no pragma that writes; a schema newer than this code is refused."""
        await self._database.open_read_only(self._target)
        try:
            await self._database.check_not_newer(OWNER, len(MIGRATIONS))
            if await self._database.backend.legacy_user_version() > len(MIGRATIONS):
                raise SchemaTooNew(f"state database {self._target} is newer: upgrade gateway-bot")
        except BaseException:
            await self.close()
            raise

    def on_transition(self, listener: TransitionListener) -> None:
        self._transition_listeners.append(listener)

    def _published(self, task: TaskRecord, previous: TaskState | None) -> TaskRecord:
        """Tell the listeners (the change feed) of a committed change; a listener's
        failure is logged, never the store's."""
        for listener in self._transition_listeners:
            try:
                listener(task, previous)
            except Exception:
                log.exception("a task state listener failed on task %s", task.id)
        return task

    async def _migrate(self) -> None:
        """The core is owner "core"; a database made before per-owner versions kept the
        core's version in PRAGMA user_version, adopted once (later opens find the row)."""
        legacy = await self._legacy_version()  # SQLite only; 0 on PostgreSQL
        if legacy:
            await self._database.adopt_version(OWNER, legacy)
        await self._database.migrate(OWNER, MIGRATIONS)

    async def _legacy_version(self) -> int:
        return await self._database.backend.legacy_user_version()

    async def prune_payloads(self, before: float) -> int:
        """Retention: completed tasks finished before ``before`` keep their row and outcome
        (state, reason, reply, cost, error) but lose the message bodies: ``raw_json``
        keeps the envelope with an empty payload (so the row still reads as a TaskRecord)
        and ``parsed_json`` is emptied. A task in any other state is never touched: its
        payload is what recovery re-authenticates or re-runs."""
        done = TaskState.COMPLETED.value
        rows = await self._database.fetch_all(
            "SELECT id, raw_json FROM tasks WHERE state = ? AND completed_at < ?"
            " AND payload_pruned_at IS NULL",
            (done, before),
        )
        now = time.time()
        await self._database.write_many(
            "UPDATE tasks SET raw_json = ?, parsed_json = NULL, payload_pruned_at = ?"
            " WHERE id = ? AND state = ?",
            [(_without_payload(row["raw_json"]), now, row["id"], done) for row in rows],
        )
        return len(rows)

    async def close(self) -> None:
        await self._database.close()

    # -- tasks -------------------------------------------------------------------------

    async def accept_inbound(
        self,
        raw: RawMessage,
        on_committed: OnCommitted | None = None,
        *,
        taking_in: bool = False,
    ) -> tuple[str, bool]:
        state = TaskState.AUTHENTICATING if taking_in else TaskState.QUEUED
        task_id, task, on_disk = await self._insert_inbound(raw, state)
        is_new = task is not None
        if on_committed is not None:  # (a future of its own: cancelling it cancels no other)
            on_committed(task_id, task, asyncio.shield(on_disk))
        # Shielded: a cancelled accept leaves the flush to whoever holds it; and this
        # return comes a turn after theirs (a person's acknowledgement goes before the ack
        # at the source).
        await asyncio.shield(on_disk)
        return task_id, is_new

    async def flush(self) -> None:
        await self._database.flush()

    async def _insert_inbound(
        self, raw: RawMessage, state: TaskState
    ) -> tuple[str, TaskRecord | None, asyncio.Future[None]]:
        """(task id, the new task as its row reads or None for a duplicate, its flush).
        The flush begins as soon as the commit is made: the disk is at it while the task
        is built and taken in. A duplicate waits for it too: the first delivery's commit
        may not be on disk yet."""
        task_id = secrets.token_hex(6)
        now = time.time()
        raw_json = json.dumps(raw.to_json())
        # One trip to the engine (issue 33): the task is added unless the message came
        # before; its inbound row only with it (the task's row exists only if it was just
        # added: its id is new); then which task holds the message, ours or the earlier one.
        # Nothing is read first (decision 0098: these come before the flush).
        found, on_disk = await self._database.batch_flushed(
            [
                (
                    "INSERT INTO tasks (id, channel, message_id, state, raw_json, created_at)"
                    " SELECT ?, ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM inbound_messages"
                    " WHERE channel = ? AND message_id = ?)",
                    (task_id, raw.channel, raw.message_id, state.value, raw_json, now,
                     raw.channel, raw.message_id),
                ),
                (
                    "INSERT INTO inbound_messages (channel, message_id, task_id, received_at)"
                    " SELECT ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM tasks WHERE id = ?)",
                    (raw.channel, raw.message_id, task_id, raw.received_at, task_id),
                ),
            ],
            (
                "SELECT task_id FROM inbound_messages WHERE channel = ? AND message_id = ?",
                (raw.channel, raw.message_id),
            ),
        )  # fmt: skip
        on_disk.add_done_callback(_seen)  # (its failure is raised to our caller)
        if not found:  # pruned between the statements (PostgreSQL)
            raise RuntimeError(f"message {raw.message_id} changed meanwhile: again")
        holder = str(found[0][0])
        if holder != task_id:
            return holder, None, on_disk
        task = TaskRecord(  # the new row, as it reads (without reading it)
            id=task_id, channel=raw.channel, message_id=raw.message_id,
            conversation_id=None, state=state, completion_reason=None,
            raw=RawMessage.from_json(json.loads(raw_json)), parsed=None, reply=None,
            reply_delivered=False, created_at=now, started_at=None, completed_at=None,
            cost_usd=0.0, num_turns=0, error=None, attempts=0,
        )  # fmt: skip
        return task_id, self._published(task, None), on_disk

    async def get_task(self, task_id: str) -> TaskRecord:
        row = await self._database.fetch_one("SELECT * FROM tasks WHERE id = ?", (task_id,))
        if row is None:
            raise KeyError(f"no task {task_id}")
        return _task_from_row(row)

    async def tasks_in_states(self, states: Iterable[TaskState]) -> list[TaskRecord]:
        values = [s.value for s in states]
        marks = ",".join("?" * len(values))
        rows = await self._database.fetch_all(
            f"SELECT * FROM tasks WHERE state IN ({marks}) ORDER BY created_at, rowid", values
        )
        return [_task_from_row(row) for row in rows]

    async def conversation_tasks(
        self, conversation_id: str, states: Iterable[TaskState]
    ) -> list[TaskRecord]:
        values = [s.value for s in states]
        marks = ",".join("?" * len(values))
        rows = await self._database.fetch_all(
            f"SELECT * FROM tasks WHERE conversation_id = ? AND state IN ({marks})"
            " ORDER BY created_at, rowid",
            [conversation_id, *values],
        )
        return [_task_from_row(row) for row in rows]

    async def transition(
        self,
        task_id: str,
        target: TaskState,
        *,
        reason: CompletionReason | None = None,
        conversation_id: str | None = None,
        parsed: InboundMessage | None = None,
        error: str | None = None,
        known: TaskRecord | None = None,
        kind: TaskKind | None = None,
    ) -> TaskRecord:
        current = known if known is not None else await self.get_task(task_id)
        check_transition(current.state, target)
        if (target is TaskState.COMPLETED) != (reason is not None):
            raise ValueError("a completion reason is required exactly when completing")
        sets = ["state = ?"]
        values: list[Any] = [target.value]
        # The task as the row will read (one trip to the database fewer per transition,
        # decision 0098); the parsed message goes through JSON as a re-read would.
        changed: dict[str, Any] = {"state": target}
        if reason is not None:
            completed_at = time.time()
            sets += ["completion_reason = ?", "completed_at = ?"]
            values += [reason.value, completed_at]
            changed.update(completion_reason=reason, completed_at=completed_at)
        if target is TaskState.EXECUTING:
            started_at = time.time()
            sets += ["started_at = ?", "attempts = attempts + 1"]
            values.append(started_at)
            changed.update(started_at=started_at, attempts=current.attempts + 1)
        if conversation_id is not None:
            sets.append("conversation_id = ?")
            values.append(conversation_id)
            changed["conversation_id"] = conversation_id
        if parsed is not None:
            parsed_json = json.dumps(parsed.to_json())
            sets.append("parsed_json = ?")
            values.append(parsed_json)
            changed["parsed"] = InboundMessage.from_json(json.loads(parsed_json))
        if error is not None:
            sets.append("error = ?")
            values.append(error)
            changed["error"] = error
        if kind is not None:
            sets.append("kind = ?")
            values.append(kind.value)
            changed["kind"] = kind
        # No state needs a flush of its own (module docstring): recovery rebuilds it from
        # the accepted message and the stored reply, both flushed before their effects.
        # A task the caller knew is updated only from the state it knew (one read fewer
        # on intake's way, decision 0098); moved meanwhile, it is read and checked as usual.
        where, keys = ("id = ? AND state = ?", [task_id, current.state.value]) if known else (
            "id = ?", [task_id])  # fmt: skip
        updated = await self._database.write(
            f"UPDATE tasks SET {', '.join(sets)} WHERE {where}", [*values, *keys], durable=False
        )
        if known is not None and not updated:
            return await self.transition(
                task_id, target, reason=reason, conversation_id=conversation_id,
                parsed=parsed, error=error, kind=kind,
            )  # fmt: skip
        return self._published(dataclasses.replace(current, **changed), current.state)

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
            "UPDATE tasks SET reply_delivered = 1, delivery_error = NULL WHERE id = ?",
            (task_id,),
            durable=False,
        )

    async def record_delivery_failure(self, task_id: str, error: str) -> None:
        await self._database.write(
            "UPDATE tasks SET delivery_error = ? WHERE id = ?", (error, task_id), durable=False
        )

    async def note_acknowledged(self, task_id: str, at: float) -> None:
        await self._database.write(
            "UPDATE tasks SET acknowledged_at = ? WHERE id = ? AND acknowledged_at IS NULL",
            (at, task_id),
            durable=False,
        )

    async def record_usage(self, task_id: str, usage: Usage) -> None:
        await self._database.write(
            "UPDATE tasks SET cost_usd = ?, num_turns = ? WHERE id = ?",
            (usage.cost_usd, usage.num_turns, task_id),
            durable=False,
        )


def _seen(done: asyncio.Future[None]) -> None:
    """A flush's failure is raised to ``accept_inbound``'s caller: not "never retrieved"."""
    if not done.cancelled():
        done.exception()
