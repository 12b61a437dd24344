"""Retention and the channels' move onto the shared database.

Pruning empties completed tasks' message bodies and drops channels' send records older
than the cutoff, keeps everything newer, and never touches a task that is not completed
(its payload is what recovery runs again). The Matrix and Slack channels' former own
files are copied over once at first start, in-flight intents included, then renamed."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from gateway_bot.channels.matrix.store import MatrixStateStore
from gateway_bot.channels.slack.records import SlackRecords
from gateway_bot.config.server import build_server_config
from gateway_bot.config.yaml_tags import ConfigError
from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from gateway_bot.domain.messages import InboundMessage, RawMessage, Reply
from gateway_bot.runtime.daemon import Daemon
from gateway_bot.state.database import Database, StateTarget
from gateway_bot.state.postgres_sql import placeholders
from gateway_bot.state.sql_store import SqlStore

DAY = 86400.0


@dataclass
class State:
    path: StateTarget
    database: Database
    store: SqlStore
    slack: SlackRecords
    matrix: MatrixStateStore

    def backdate(self, sql: str, days: float, *params: object) -> None:
        """Move rows into the past, as if written ``days`` ago (a second connection, as
        the passing of time would)."""
        values = (time.time() - days * DAY, *params)
        if isinstance(self.path, Path):
            with sqlite3.connect(self.path) as db:
                db.execute(sql, values)
        else:
            with psycopg.connect(self.path, autocommit=True) as db:
                db.execute(placeholders(sql), values)  # type: ignore[arg-type]


@pytest.fixture
async def state(tmp_path: Path, state_target: StateTarget) -> AsyncIterator[State]:
    """On both engines."""
    database = Database()
    made = State(
        state_target,
        database,
        SqlStore(state_target, database),
        SlackRecords(database, legacy_path=tmp_path / "slack" / "slack.db"),
        MatrixStateStore(database, legacy_path=tmp_path / "matrix" / "matrix.db"),
    )
    await made.store.open()
    yield made
    await made.store.close()


def message(message_id: str) -> RawMessage:
    return RawMessage("slack", message_id, "U1", {"text": f"secret {message_id}"}, time.time())


def parsed(raw: RawMessage) -> InboundMessage:
    return InboundMessage(
        channel=raw.channel,
        message_id=raw.message_id,
        sender_id="U1",
        sender_name="Alice",
        body=str(raw.payload["text"]),
        conversation_key="T:C:1",
        received_at=raw.received_at,
    )


async def finished_task(store: SqlStore, message_id: str) -> str:
    raw = message(message_id)
    task_id, _ = await store.accept_inbound(raw)
    await store.transition(task_id, TaskState.AUTHENTICATING)
    conversation = await store.create_conversation("slack", f"T:C:{message_id}", None)
    await store.transition(
        task_id, TaskState.PENDING, conversation_id=conversation.id, parsed=parsed(raw)
    )
    await store.transition(task_id, TaskState.EXECUTING)
    await store.record_reply(task_id, Reply(text=f"answer to {message_id}"))
    await store.mark_reply_delivered(task_id)
    await store.transition(task_id, TaskState.COMPLETED, reason=CompletionReason.SUCCESS)
    return task_id


async def test_old_completed_tasks_lose_their_bodies_and_keep_their_outcome(
    state: State,
) -> None:
    old = await finished_task(state.store, "old")
    recent = await finished_task(state.store, "recent")
    state.backdate("UPDATE tasks SET completed_at = ? WHERE id = ?", 40, old)
    state.backdate("UPDATE tasks SET completed_at = ? WHERE id = ?", 10, recent)

    touched = await state.database.prune(time.time() - 30 * DAY)

    assert touched["core"] == 1
    pruned = await state.store.get_task(old)
    assert pruned.raw.payload == {}
    assert pruned.parsed is None
    assert pruned.state is TaskState.COMPLETED
    assert pruned.completion_reason is CompletionReason.SUCCESS
    assert pruned.reply == Reply(text="answer to old")
    assert pruned.raw.message_id == "old"  # the envelope stays: de-duplication, listings
    kept = await state.store.get_task(recent)
    assert kept.raw.payload == {"text": "secret recent"}
    assert kept.parsed is not None
    # Pruning again finds nothing more to do.
    assert (await state.database.prune(time.time() - 30 * DAY))["core"] == 0
    # A redelivery of the pruned message is still recognised as a duplicate.
    assert await state.store.accept_inbound(message("old")) == (old, False)


async def test_tasks_that_are_not_completed_are_never_pruned(state: State) -> None:
    queued, _ = await state.store.accept_inbound(message("queued"))
    held, _ = await state.store.accept_inbound(message("held"))
    await state.store.transition(held, TaskState.AUTHENTICATING)
    undelivered = await finished_task(state.store, "undelivered-base")
    # An executing task with a stored reply that the channel would not take.
    waiting, _ = await state.store.accept_inbound(message("waiting"))
    await state.store.transition(waiting, TaskState.AUTHENTICATING)
    conversation = await state.store.create_conversation("slack", "T:C:w", None)
    await state.store.transition(waiting, TaskState.PENDING, conversation_id=conversation.id)
    await state.store.transition(waiting, TaskState.EXECUTING)
    await state.store.record_reply(waiting, Reply(text="parked"))
    await state.store.transition(waiting, TaskState.UNDELIVERED)
    for task_id in (queued, held, waiting):
        state.backdate(
            "UPDATE tasks SET created_at = ?, completed_at = created_at WHERE id = ?",
            90,
            task_id,
        )

    touched = await state.database.prune(time.time() + DAY)  # everything is "old"

    assert touched["core"] == 1  # only the completed one
    assert (await state.store.get_task(undelivered)).raw.payload == {}
    for task_id, name in ((queued, "queued"), (held, "held"), (waiting, "waiting")):
        task = await state.store.get_task(task_id)
        assert task.raw.payload == {"text": f"secret {name}"}, task.state


async def test_channel_ledgers_older_than_the_cutoff_are_dropped(state: State) -> None:
    slack, matrix = state.slack, state.matrix
    await slack.intend_post("t-old", "reply", 0, "C1")
    await slack.confirm_post("t-old", "reply", 0, "111.1")
    await slack.intend_post("t-crashed", "reply", 0, "C1")  # unconfirmed: kept at any age
    await slack.intend_post("t-new", "reply", 0, "C1")
    await slack.confirm_post("t-new", "reply", 0, "222.2")
    await slack.intend_upload("C1", "1.0", "old.txt", "aa")
    await slack.confirm_upload("C1", "1.0", "old.txt", "aa", "F1")
    await slack.intend_upload("C1", "1.0", "new.txt", "bb")
    await slack.confirm_upload("C1", "1.0", "new.txt", "bb", "F2")
    await slack.join_thread("T", "C1", "1.0")
    await matrix.save_progress_message("t-old", "!r", "$ack-old")
    await matrix.save_progress_message("t-new", "!r", "$ack-new")
    await matrix.save_card("$card-old", "!r", ["✅"])
    await matrix.save_card("$card-new", "!r", ["✅"])
    await matrix.save_login("http://hs", "@bot:hs", "DEV", "token")
    await matrix.save_position("@bot:hs", "s1", ["!r"], [])
    state.backdate("UPDATE slack_posts SET intended_at = ? WHERE task_id != 't-new'", 40)
    state.backdate("UPDATE slack_uploads SET intended_at = ? WHERE name = 'old.txt'", 40)
    state.backdate("UPDATE matrix_progress_messages SET created_at = ? WHERE task_id = 't-old'", 40)
    state.backdate("UPDATE matrix_cards SET created_at = ? WHERE event_id = '$card-old'", 40)

    touched = await state.database.prune(time.time() - 30 * DAY)

    assert touched["slack"] == 2
    assert touched["matrix"] == 2
    assert await slack.post("t-old", "reply", 0) is None
    crashed = await slack.post("t-crashed", "reply", 0)
    assert crashed is not None
    assert crashed.ts is None
    new_post = await slack.post("t-new", "reply", 0)
    assert new_post is not None
    assert new_post.ts == "222.2"
    assert await slack.upload("C1", "1.0", "old.txt", "aa") is None
    assert await slack.upload("C1", "1.0", "new.txt", "bb") is not None
    assert await slack.in_thread("T", "C1", "1.0")
    assert await matrix.progress_message("t-old") is None
    assert await matrix.progress_message("t-new") == "$ack-new"
    assert await matrix.card_emojis("$card-old") is None
    assert await matrix.card_emojis("$card-new") == ["✅"]
    assert await matrix.load_login("http://hs", "@bot:hs") == ("DEV", "token")
    assert (await matrix.load_position("@bot:hs")).next_batch == "s1"


async def test_one_owners_failing_pruner_does_not_stop_the_others(state: State) -> None:
    async def broken(before: float) -> int:
        raise RuntimeError("disk on fire")

    state.database.add_pruner("email", broken)
    old = await finished_task(state.store, "old")
    state.backdate("UPDATE tasks SET completed_at = ? WHERE id = ?", 40, old)

    touched = await state.database.prune(time.time() - 30 * DAY)

    assert "email" not in touched
    assert touched["core"] == 1


def make_legacy_slack_file(path: Path) -> None:
    """The Slack channel's own file as the former records.py made it (schema version 1)."""
    path.parent.mkdir(parents=True)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(
        """BEGIN;
        CREATE TABLE posts (task_id TEXT NOT NULL, kind TEXT NOT NULL, part INTEGER NOT NULL,
            channel TEXT NOT NULL, ts TEXT, intended_at REAL NOT NULL,
            PRIMARY KEY (task_id, kind, part));
        CREATE TABLE uploads (channel TEXT NOT NULL, thread_ts TEXT NOT NULL,
            name TEXT NOT NULL, sha256 TEXT NOT NULL, file_id TEXT, intended_at REAL NOT NULL,
            PRIMARY KEY (channel, thread_ts, name, sha256));
        CREATE TABLE threads (team TEXT NOT NULL, channel TEXT NOT NULL,
            thread_ts TEXT NOT NULL, PRIMARY KEY (team, channel, thread_ts));
        PRAGMA user_version = 1;
        COMMIT;"""
    )
    now = time.time()
    db.execute("INSERT INTO posts VALUES ('t1', 'ack', 0, 'C1', '100.1', ?)", (now,))
    db.execute("INSERT INTO posts VALUES ('t1', 'reply', 0, 'C1', NULL, ?)", (now,))
    db.execute("INSERT INTO uploads VALUES ('C1', '100.0', 'a.txt', 'ff', 'F9', ?)", (now,))
    db.execute("INSERT INTO threads VALUES ('T', 'C1', '100.0')")
    db.close()


def make_legacy_matrix_file(path: Path) -> None:
    """The Matrix channel's own file as the former store.py made it."""
    path.parent.mkdir(parents=True)
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE login (homeserver TEXT NOT NULL, user_id TEXT NOT NULL,
            device_id TEXT NOT NULL, access_token TEXT NOT NULL,
            PRIMARY KEY (homeserver, user_id));
        CREATE TABLE sync_position (user_id TEXT PRIMARY KEY, next_batch TEXT NOT NULL,
            updated_at REAL NOT NULL);
        CREATE TABLE joined_rooms (user_id TEXT NOT NULL, room_id TEXT NOT NULL,
            PRIMARY KEY (user_id, room_id));
        CREATE TABLE direct_rooms (user_id TEXT NOT NULL, room_id TEXT NOT NULL,
            PRIMARY KEY (user_id, room_id));
        CREATE TABLE progress_messages (task_id TEXT PRIMARY KEY, room_id TEXT NOT NULL,
            event_id TEXT NOT NULL, created_at REAL NOT NULL);
        CREATE TABLE cards (event_id TEXT PRIMARY KEY, room_id TEXT NOT NULL,
            emojis_json TEXT NOT NULL, created_at REAL NOT NULL);
        CREATE TABLE encrypted_rooms_told (room_id TEXT PRIMARY KEY);
        """
    )
    now = time.time()
    with db:
        db.execute("INSERT INTO login VALUES ('http://hs', '@bot:hs', 'OLDDEV', 'tok')")
        db.execute("INSERT INTO sync_position VALUES ('@bot:hs', 's42', ?)", (now,))
        db.execute("INSERT INTO joined_rooms VALUES ('@bot:hs', '!a:hs')")
        db.execute("INSERT INTO direct_rooms VALUES ('@bot:hs', '!dm:hs')")
        db.execute("INSERT INTO progress_messages VALUES ('t7', '!a:hs', '$ack', ?)", (now,))
        db.execute("INSERT INTO cards VALUES ('$card', '!a:hs', '[\"✅\", \"❌\"]', ?)", (now,))
        db.execute("INSERT INTO encrypted_rooms_told VALUES ('!enc:hs')")
    db.close()


async def test_a_slack_deployment_keeps_its_records_after_the_upgrade(
    tmp_path: Path, state_target: StateTarget
) -> None:
    legacy = tmp_path / "slack" / "slack.db"
    make_legacy_slack_file(legacy)
    database = Database()
    await database.open(state_target)
    try:
        records = SlackRecords(database, legacy_path=legacy)
        ack = await records.post("t1", "ack", 0)
        assert ack is not None
        assert ack.ts == "100.1"
        in_flight = await records.post("t1", "reply", 0)  # died inside the call
        assert in_flight is not None
        assert in_flight.ts is None
        upload = await records.upload("C1", "100.0", "a.txt", "ff")
        assert upload is not None
        assert upload.file_id == "F9"
        assert await records.in_thread("T", "C1", "100.0")
        assert not legacy.exists()
        assert legacy.with_name("slack.db.migrated").is_file()

        # The next start (a new store on the same database) finds nothing to import.
        again = SlackRecords(database, legacy_path=legacy)
        assert await again.in_thread("T", "C1", "100.0")
    finally:
        await database.close()


async def test_a_matrix_deployment_keeps_its_position_and_cards_after_the_upgrade(
    tmp_path: Path, state_target: StateTarget
) -> None:
    legacy = tmp_path / "matrix" / "matrix.db"
    make_legacy_matrix_file(legacy)
    database = Database()
    await database.open(state_target)
    try:
        store = MatrixStateStore(database, legacy_path=legacy)
        assert await store.load_login("http://hs", "@bot:hs") == ("OLDDEV", "tok")
        position = await store.load_position("@bot:hs")
        assert position.next_batch == "s42"
        assert position.joined_rooms == frozenset({"!a:hs"})
        assert await store.is_direct("@bot:hs", "!dm:hs")
        assert await store.progress_message("t7") == "$ack"
        assert await store.card_emojis("$card") == ["✅", "❌"]
        assert await store.encrypted_room_told("!enc:hs")
        assert legacy.with_name("matrix.db.migrated").is_file()
        assert not legacy.exists()
    finally:
        await database.close()


async def test_an_import_repeated_after_a_crash_before_the_rename_changes_nothing(
    tmp_path: Path,
) -> None:
    """The copy commits, then the file is renamed: a crash between the two repeats the
    copy at the next start, which must neither fail nor undo what changed since."""
    legacy = tmp_path / "slack" / "slack.db"
    make_legacy_slack_file(legacy)
    backup = tmp_path / "copy-of-slack.db"
    backup.write_bytes(legacy.read_bytes())
    database = Database()
    await database.open(tmp_path / "state.db")
    try:
        first = SlackRecords(database, legacy_path=legacy)
        await first.confirm_post("t1", "reply", 0, "100.2")
        backup.rename(legacy)  # as if the rename had never happened
        second = SlackRecords(database, legacy_path=legacy)
        confirmed = await second.post("t1", "reply", 0)
        assert confirmed is not None
        assert confirmed.ts == "100.2"
    finally:
        await database.close()


async def test_the_daemon_prunes_with_the_configured_retention(tmp_path: Path) -> None:
    """``state.retention_days`` reaches the pruning the daemon runs at start and daily."""
    config = build_server_config(
        {
            "state_dir": str(tmp_path / "state"),
            "repo": {"url": str(tmp_path / "repo")},
            "sandbox": {"kind": "none"},
            "state": {"retention_days": 7},
        },
        "test.yaml",
    )
    daemon = Daemon(config, {}, {})
    await daemon.store.open()
    try:
        week_old = await finished_task(daemon.store, "eight-days")
        yesterday = await finished_task(daemon.store, "yesterday")
        path = config.state_dir / "state.db"
        for task_id, days in ((week_old, 8), (yesterday, 1)):
            with sqlite3.connect(path) as db:
                db.execute(
                    "UPDATE tasks SET completed_at = ? WHERE id = ?",
                    (time.time() - days * DAY, task_id),
                )
        assert (await daemon.prune_old_state())["core"] == 1
        assert (await daemon.store.get_task(week_old)).raw.payload == {}
        assert (await daemon.store.get_task(yesterday)).raw.payload != {}
    finally:
        await daemon.store.close()


def test_retention_defaults_to_30_days_and_a_misspelt_key_is_an_error(tmp_path: Path) -> None:
    base = {"repo": {"url": str(tmp_path)}}
    assert build_server_config(base, "t.yaml").state.retention_days == 30
    with pytest.raises(ConfigError, match="retention_dayz"):
        build_server_config({**base, "state": {"retention_dayz": 7}}, "t.yaml")
