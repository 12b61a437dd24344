"""One state database, several owners: each owner's migrations apply in order and are
counted on their own, and a database made before per-owner versions (the core's schema in
PRAGMA user_version) upgrades in place without losing a row."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from gateway_bot.domain.messages import RawMessage, Reply
from gateway_bot.state.database import Database, SchemaTooNew, StateTarget
from gateway_bot.state.migrations import MIGRATIONS
from gateway_bot.state.sql_store import SqlStore

LEGACY_CORE_VERSION = 5
"""The core's schema version when it was still kept in PRAGMA user_version."""


def make_legacy_database(path: Path, *, with_tasks: bool = True) -> None:
    """What gateway-bot made before per-owner versions: the core's first five migrations,
    each committed with ``PRAGMA user_version`` (the former ``SqlStore._migrate``), and
    a console conversation with a finished and a queued task in it."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    for number, script in enumerate(MIGRATIONS[:LEGACY_CORE_VERSION], start=1):
        db.executescript(f"BEGIN;\n{script}\nPRAGMA user_version={number};\nCOMMIT;")
    if not with_tasks:
        db.close()
        return
    now = time.time()
    db.execute(
        "INSERT INTO conversations (id, channel, channel_key, created_at, updated_at)"
        " VALUES ('c1', 'console', 'default', ?, ?)",
        (now, now),
    )
    for task_id, state in (("t-done", "completed"), ("t-queued", "queued")):
        raw = RawMessage("console", task_id, "alice", {"text": f"hello {task_id}"}, now)
        db.execute(
            "INSERT INTO tasks (id, channel, message_id, conversation_id, state, raw_json,"
            " reply_json, created_at) VALUES (?, 'console', ?, 'c1', ?, ?, ?, ?)",
            (task_id, task_id, state, json.dumps(raw.to_json()), None, now),
        )
    db.close()


@pytest.fixture
async def database(state_target: StateTarget) -> AsyncIterator[Database]:
    """On both engines."""
    opened = Database()
    await opened.open(state_target)
    yield opened
    await opened.close()


def versions(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT owner, version FROM schema_versions"))


async def versions_in(database: Database) -> dict[str, int]:
    rows = await database.fetch_all("SELECT owner, version FROM schema_versions")
    return {str(row[0]): int(row[1]) for row in rows}


async def test_a_database_from_before_owner_versions_is_upgraded_in_place(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    make_legacy_database(path)

    store = SqlStore(path)
    await store.open()
    try:
        assert versions(path) == {"core": len(MIGRATIONS)}
        done = await store.get_task("t-done")
        assert done.raw.payload == {"text": "hello t-done"}
        queued = await store.tasks_in_states([TaskState.QUEUED])
        assert [t.id for t in queued] == ["t-queued"]
        conversation = await store.active_conversation("console", "default")
        assert conversation is not None
        assert conversation.id == "c1"
        # The store works on the upgraded schema as on a new one.
        task_id, _ = await store.accept_inbound(
            RawMessage("console", "m-new", "alice", {"text": "again"}, time.time())
        )
        assert (await store.get_task(task_id)).state is TaskState.QUEUED
    finally:
        await store.close()

    # Opening again neither re-adopts nor re-runs anything.
    again = SqlStore(path)
    await again.open()
    await again.close()
    assert versions(path) == {"core": len(MIGRATIONS)}


async def test_owners_migrate_independently(database: Database) -> None:
    alpha = [
        "CREATE TABLE alpha_items (id TEXT PRIMARY KEY);",
        "ALTER TABLE alpha_items ADD COLUMN note TEXT;",
    ]
    beta = ["CREATE TABLE beta_items (id TEXT PRIMARY KEY, n INTEGER NOT NULL);"]

    await database.migrate("alpha", alpha)
    await database.migrate("beta", beta)
    assert await versions_in(database) == {"alpha": 2, "beta": 1}

    # A later release appends to alpha only: beta's migrations are not run again.
    await database.write("INSERT INTO beta_items (id, n) VALUES ('kept', 1)")
    await database.migrate("alpha", [*alpha, "CREATE INDEX alpha_note ON alpha_items(note);"])
    await database.migrate("beta", beta)
    assert await versions_in(database) == {"alpha": 3, "beta": 1}
    assert [tuple(r) for r in await database.fetch_all("SELECT id FROM beta_items")] == [("kept",)]


async def test_a_failing_migration_leaves_its_owner_at_the_last_good_version(
    database: Database,
) -> None:
    good = "CREATE TABLE gamma_items (id TEXT PRIMARY KEY);"
    broken = "CREATE TABLE gamma_more (id TEXT); INSERT INTO no_such_table VALUES (1);"
    await database.migrate("gamma", [good])
    with pytest.raises((sqlite3.OperationalError, psycopg.errors.UndefinedTable)):
        await database.migrate("gamma", [good, broken])

    assert await versions_in(database) == {"gamma": 1}
    tables = [t for t in await database.backend.table_names() if t.startswith("gamma")]
    assert tables == ["gamma_items"]  # the half-applied one rolled back
    # The database is usable afterwards (no transaction left open).
    await database.write("INSERT INTO gamma_items (id) VALUES ('x')")
    await database.migrate("gamma", [good, "CREATE TABLE gamma_more (id TEXT);"])
    assert await versions_in(database) == {"gamma": 2}


async def test_a_schema_newer_than_the_code_is_refused(database: Database) -> None:
    await database.migrate("delta", ["CREATE TABLE delta_a (id TEXT);", "SELECT 1;"])
    with pytest.raises(SchemaTooNew, match="upgrade gateway-bot"):
        await database.migrate("delta", ["CREATE TABLE delta_a (id TEXT);"])


async def test_owner_names_cannot_smuggle_sql(database: Database) -> None:
    with pytest.raises(ValueError, match="owner"):
        await database.migrate("x'); DROP TABLE tasks; --", ["SELECT 1;"])


async def test_the_core_and_a_channel_share_one_file(state_target: StateTarget) -> None:
    """The daemon's store opens the database that channels were built on."""
    database = Database()
    store = SqlStore(state_target, database)
    await store.open()
    try:
        await database.migrate("slack", ["CREATE TABLE slack_probe (id TEXT);"])
        task_id, _ = await store.accept_inbound(
            RawMessage("console", "m1", "alice", {"text": "hi"}, time.time())
        )
        await store.transition(task_id, TaskState.AUTHENTICATING)
        await store.transition(task_id, TaskState.COMPLETED, reason=CompletionReason.UNAUTHORIZED)
        await store.record_reply(task_id, Reply(text="no"))
        assert await versions_in(database) == {"core": len(MIGRATIONS), "slack": 1}
    finally:
        await store.close()
