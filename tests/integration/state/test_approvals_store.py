"""Approval records on disk: codes that never clash (and a clash that is retried, not a
crash), which held messages a card showed, and memberships that can be taken back."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from gateway_bot.state import approvals_store as approvals_module
from gateway_bot.state.database import StateTarget
from gateway_bot.state.migrations import MIGRATIONS
from gateway_bot.state.sql_store import SqlStore


@pytest.fixture
async def store(state_target: StateTarget) -> AsyncIterator[SqlStore]:
    """On both engines."""
    opened = SqlStore(state_target)
    await opened.open()
    yield opened
    await opened.close()


async def card_for(store: SqlStore, sender: str) -> str:
    record = await store.approvals.create(
        channel="matrix",
        room="!team:hs",
        room_title="Team",
        sender_id=sender,
        sender_name=sender,
        preview="hi",
        expires_at=time.time() + 3600,
    )
    return record.code


async def test_codes_are_long_and_a_clash_is_retried(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await card_for(store, "@a:hs")
    assert len(first) == 12, "12 hex characters: 48 bits"

    # Bad luck on purpose: the generator hands out a code that is taken, then a free one.
    drawn: Iterator[str] = iter([first, first, "0123456789ab"])
    monkeypatch.setattr(
        approvals_module, "secrets", SimpleNamespace(token_hex=lambda n: next(drawn))
    )
    second = await card_for(store, "@b:hs")
    assert second == "0123456789ab"
    other = await store.approvals.get(first)
    assert other is not None
    assert other.sender_id == "@a:hs", "the clash left the first card alone"


async def test_revoking_one_room_or_everywhere(store: SqlStore) -> None:
    await card_for(store, "@m:hs")
    await store.approvals.add_member("matrix", "!team:hs", "@m:hs", "@owner:hs")
    await store.approvals.add_member("matrix", "!lab:hs", "@m:hs", "@owner:hs")
    await store.approvals.add_member("slack", "!team:hs", "@m:hs", "@owner:hs")

    rooms = await store.approvals.member_rooms("matrix", "@m:hs")
    assert rooms == [("!team:hs", "Team"), ("!lab:hs", "!lab:hs")]
    assert await store.approvals.remove_member("matrix", "@m:hs", "!team:hs") == 1
    assert not await store.approvals.is_member("matrix", "!team:hs", "@m:hs")
    assert await store.approvals.is_member("matrix", "!lab:hs", "@m:hs")
    assert await store.approvals.remove_member("matrix", "@m:hs", None) == 1
    assert await store.approvals.member_rooms("matrix", "@m:hs") == []
    assert await store.approvals.is_member("slack", "!team:hs", "@m:hs"), "other channels stay"


async def test_upgrade_keeps_what_an_old_card_showed(tmp_path: Path) -> None:
    """A card sent before the upgrade quoted only its first held message: after it, Allow
    runs that one, not the ones the owner never saw."""
    path = tmp_path / "state.db"
    with sqlite3.connect(path) as db:
        for number, script in enumerate(MIGRATIONS[:3], start=1):
            db.executescript(script)
            db.execute(f"PRAGMA user_version = {number}")
        db.execute(
            "INSERT INTO approvals (code, channel, room, room_title, sender_id, sender_name,"
            " preview, state, created_at, expires_at) VALUES"
            " ('abc123', 'matrix', '!team:hs', 'Team', '@m:hs', 'M', 'one', 'pending', 1, 2)"
        )
        for n, task in enumerate(("task-one", "task-two")):
            db.execute(
                "INSERT INTO approval_tasks (code, task_id, held_at) VALUES ('abc123', ?, ?)",
                (task, float(n)),
            )
    store = SqlStore(path)
    await store.open()
    try:
        assert await store.approvals.held_tasks("abc123") == ["task-one", "task-two"]
        assert await store.approvals.shown_tasks("abc123") == ["task-one"]
        await store.approvals.mark_shown("abc123", ["task-two"])
        assert await store.approvals.shown_tasks("abc123") == ["task-one", "task-two"]
    finally:
        await store.close()


async def test_a_nul_in_a_strangers_name_and_message_cannot_break_the_card(
    store: SqlStore,
) -> None:
    """PostgreSQL refuses NUL in text: the engine stores U+FFFD there instead of failing."""
    record = await store.approvals.create(
        channel="matrix",
        room="!team:hs",
        room_title="Team",
        sender_id="@evil:hs",
        sender_name="Ev\x00il",
        preview="hello\x00world",
        expires_at=time.time() + 3600,
    )
    found = await store.approvals.get(record.code)
    assert found is not None
    assert found.sender_name.replace("\x00", "\ufffd") == "Ev\ufffdil"
    assert found.preview.replace("\x00", "\ufffd") == "hello\ufffdworld"
