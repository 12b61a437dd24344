"""The SQLite store: durable acceptance, de-duplication, the lifecycle rules, migrations."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from gateway_bot.domain.lifecycle import CompletionReason, IllegalTransition, TaskState
from gateway_bot.domain.messages import RawMessage, Reply
from gateway_bot.state.migrations import MIGRATIONS
from gateway_bot.state.sqlite_store import SqliteStore


def raw(message_id: str) -> RawMessage:
    return RawMessage("console", message_id, "alice", {"text": "hi"}, time.time())


@pytest.fixture
async def store(tmp_path: Path):
    opened = SqliteStore(tmp_path / "state.db")
    await opened.open()
    yield opened
    await opened.close()


async def test_accepted_message_is_on_disk_before_returning(
    store: SqliteStore, tmp_path: Path
) -> None:
    task_id, is_new = await store.accept_inbound(raw("m1"))
    assert is_new
    assert len(task_id) == 12
    # A second connection (another process after a crash) sees it at once.
    with sqlite3.connect(tmp_path / "state.db") as other:
        row = other.execute("SELECT state FROM tasks WHERE id = ?", (task_id,)).fetchone()
    assert row == ("queued",)


async def test_redelivered_message_is_not_a_second_task(store: SqliteStore) -> None:
    first, _ = await store.accept_inbound(raw("m1"))
    again, is_new = await store.accept_inbound(raw("m1"))
    assert (again, is_new) == (first, False)
    assert len(await store.tasks_in_states([TaskState.QUEUED])) == 1


async def test_illegal_transitions_are_refused(store: SqliteStore) -> None:
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


async def test_reply_survives_until_delivered(store: SqliteStore) -> None:
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


async def test_new_conversation_retires_the_old_one(store: SqliteStore) -> None:
    old = await store.create_conversation("console", "default", None)
    new = await store.create_conversation("console", "default", None)
    active = await store.active_conversation("console", "default")
    assert active is not None
    assert active.id == new.id != old.id
    assert not (await store.get_conversation(old.id)).active


async def test_schema_is_versioned(store: SqliteStore, tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "state.db") as other:
        versions = dict(other.execute("SELECT owner, version FROM schema_versions"))
        (mode,) = other.execute("PRAGMA journal_mode").fetchone()
    assert versions == {"core": len(MIGRATIONS)}
    assert mode == "wal"


async def test_newer_schema_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE schema_versions (owner TEXT PRIMARY KEY, version INTEGER)")
        db.execute("INSERT INTO schema_versions VALUES ('core', ?)", (len(MIGRATIONS) + 1,))
    with pytest.raises(RuntimeError, match="upgrade gateway-bot"):
        await SqliteStore(path).open()


async def test_a_legacy_schema_newer_than_this_code_is_refused_too(tmp_path: Path) -> None:
    """A database still versioned by PRAGMA user_version (before per-owner versions)."""
    path = tmp_path / "state.db"
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    with pytest.raises(RuntimeError, match="upgrade gateway-bot"):
        await SqliteStore(path).open()


async def test_concurrent_writers_do_not_collide(store: SqliteStore) -> None:
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
