"""The store on both engines (SQLite and PostgreSQL, ``state_target``): durable acceptance,
de-duplication, the lifecycle rules, migrations."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from gateway_bot.domain.lifecycle import CompletionReason, IllegalTransition, TaskState
from gateway_bot.domain.messages import RawMessage, Reply
from gateway_bot.state.database import Database, StateTarget
from gateway_bot.state.migrations import MIGRATIONS
from gateway_bot.state.sql_store import SqlStore


def raw(message_id: str) -> RawMessage:
    return RawMessage("console", message_id, "alice", {"text": "hi"}, time.time())


@pytest.fixture
async def store(state_target: StateTarget):
    opened = SqlStore(state_target)
    await opened.open()
    yield opened
    await opened.close()


async def read_other(target: StateTarget, sql: str, params: tuple[object, ...] = ()) -> list[tuple]:
    """Rows as a second connection (another process after a crash) reads them."""
    other = Database()
    await other.open_read_only(target)
    try:
        return [tuple(row) for row in await other.fetch_all(sql, params)]
    finally:
        await other.close()


async def test_accepted_message_is_on_disk_before_returning(
    store: SqlStore, state_target: StateTarget
) -> None:
    task_id, is_new = await store.accept_inbound(raw("m1"))
    assert is_new
    assert len(task_id) == 12
    # A second connection (another process after a crash) sees it at once.
    rows = await read_other(state_target, "SELECT state FROM tasks WHERE id = ?", (task_id,))
    assert rows == [("queued",)]


async def test_redelivered_message_is_not_a_second_task(store: SqlStore) -> None:
    first, _ = await store.accept_inbound(raw("m1"))
    again, is_new = await store.accept_inbound(raw("m1"))
    assert (again, is_new) == (first, False)
    assert len(await store.tasks_in_states([TaskState.QUEUED])) == 1


async def test_illegal_transitions_are_refused(store: SqlStore) -> None:
    task_id, _ = await store.accept_inbound(raw("m1"))
    with pytest.raises(IllegalTransition):
        await store.transition(task_id, TaskState.EXECUTING)
    await store.transition(task_id, TaskState.AUTHENTICATING)
    with pytest.raises(ValueError, match="completion reason"):
        await store.transition(task_id, TaskState.COMPLETED)
    done = await store.transition(
        task_id, TaskState.COMPLETED, reason=CompletionReason.UNAUTHORIZED
    )
    assert done.completion_reason is CompletionReason.UNAUTHORIZED
    with pytest.raises(IllegalTransition):
        await store.transition(task_id, TaskState.PENDING)


async def test_a_transition_from_a_task_that_moved_since_it_was_read_is_checked_again(
    store: SqlStore,
) -> None:
    """``known`` spares the read, never the check: the row moves only from the state the
    caller knew, else the task is read again and the lifecycle decides."""
    task_id, _ = await store.accept_inbound(raw("m1"))
    queued = await store.get_task(task_id)
    authenticating = await store.transition(task_id, TaskState.AUTHENTICATING, known=queued)
    assert authenticating.state is TaskState.AUTHENTICATING
    await store.transition(task_id, TaskState.COMPLETED, reason=CompletionReason.REJECTED)
    with pytest.raises(IllegalTransition):  # known says AUTHENTICATING: it is COMPLETED
        await store.transition(task_id, TaskState.PENDING, known=authenticating)
    assert (await store.get_task(task_id)).state is TaskState.COMPLETED


async def test_reply_survives_until_delivered(store: SqlStore) -> None:
    task_id, _ = await store.accept_inbound(raw("m1"))
    await store.transition(task_id, TaskState.AUTHENTICATING)
    conversation = await store.create_conversation("console", "default", None)
    await store.transition(task_id, TaskState.PENDING, conversation_id=conversation.id)
    executing = await store.transition(task_id, TaskState.EXECUTING)
    assert executing.attempts == 1
    await store.record_reply(task_id, Reply(text="done"))
    task = await store.get_task(task_id)
    assert task.reply == Reply(text="done")
    assert not task.reply_delivered


async def test_new_conversation_retires_the_old_one(store: SqlStore) -> None:
    old = await store.create_conversation("console", "default", None)
    new = await store.create_conversation("console", "default", None)
    active = await store.active_conversation("console", "default")
    assert active is not None
    assert active.id == new.id != old.id
    assert not (await store.get_conversation(old.id)).active


async def test_schema_is_versioned(store: SqlStore, state_target: StateTarget) -> None:
    versions = dict(await read_other(state_target, "SELECT owner, version FROM schema_versions"))
    assert versions == {"core": len(MIGRATIONS)}
    if isinstance(state_target, Path):
        with sqlite3.connect(state_target) as other:
            (mode,) = other.execute("PRAGMA journal_mode").fetchone()
        assert mode == "wal"


async def test_newer_schema_is_refused_with_a_clear_error(state_target: StateTarget) -> None:
    newer = Database()
    await newer.open(state_target)
    await newer.write("CREATE TABLE schema_versions (owner TEXT PRIMARY KEY, version INTEGER)")
    await newer.write("INSERT INTO schema_versions VALUES ('core', ?)", (len(MIGRATIONS) + 1,))
    await newer.close()
    with pytest.raises(RuntimeError, match="upgrade gateway-bot"):
        await SqlStore(state_target).open()


async def test_a_legacy_schema_newer_than_this_code_is_refused_too(tmp_path: Path) -> None:
    """A database still versioned by PRAGMA user_version (before per-owner versions)."""
    path = tmp_path / "state.db"
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    with pytest.raises(RuntimeError, match="upgrade gateway-bot"):
        await SqlStore(path).open()


async def test_concurrent_writers_do_not_collide(store: SqlStore) -> None:
    """Many coroutines accepting messages and making conversations on one connection."""
    import asyncio

    results = await asyncio.gather(
        *(store.accept_inbound(raw(f"m{n}")) for n in range(30)),
        *(store.create_conversation("console", f"room{n % 3}", None) for n in range(30)),
        *(store.approvals.add_member("matrix", "!r", f"@u{n}:hs", "@o:hs") for n in range(10)),
    )
    assert len({task_id for task_id, _ in results[:30]}) == 30
    assert len(await store.tasks_in_states([TaskState.QUEUED])) == 30
    for n in range(3):
        assert await store.active_conversation("console", f"room{n}") is not None
