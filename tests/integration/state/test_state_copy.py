"""Moving a deployment to PostgreSQL: ``gateway-bot migrate`` (only migrates, says what it
applied), ``gateway-bot state copy`` (every table, verified counts, never into a database
that holds rows unless told), and a console deployment that, copied over and restarted on
PostgreSQL, resumes its conversation with its history."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import yaml

from gateway_bot.cli import main
from gateway_bot.domain.messages import RawMessage
from gateway_bot.state.database import Database
from gateway_bot.state.migrations import MIGRATIONS
from gateway_bot.state.sql_store import SqlStore
from tests.conftest import write_config
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.pg_fixtures import PostgresServer

pytestmark = pytest.mark.slow


def with_state_url(config: Path, variable: str) -> None:
    """``state.url: !env VARIABLE`` in the config (the URL may hold a password)."""
    config.write_text(config.read_text() + f"state:\n  url: !env {variable}\n")


async def rows(target: Path | str, sql: str) -> list[tuple[object, ...]]:
    database = Database()
    await database.open(target)
    try:
        return [tuple(row) for row in await database.fetch_all(sql)]
    finally:
        await database.close()


def test_migrate_applies_every_owner_once_then_reports_up_to_date(
    tmp_path: Path,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "gateway-bot.yaml"
    config.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"), "repo": {"url": "."}}))
    with_state_url(config, "GWBT_TEST_STATE_URL")
    monkeypatch.setenv("GWBT_TEST_STATE_URL", postgres_url)

    assert main(["migrate", "--config", str(config)]) == 0
    first = capsys.readouterr().out
    assert "(postgresql)" in first
    assert f"core: applied {', '.join(str(n) for n in range(1, len(MIGRATIONS) + 1))}" in first
    assert "email: applied 1" in first
    assert main(["migrate", "--config", str(config)]) == 0
    second = capsys.readouterr().out
    assert f"core: up to date (schema version {len(MIGRATIONS)})" in second
    assert "applied" not in second
    assert not (tmp_path / "state" / "state.db").exists(), "nothing went to SQLite"


async def a_sqlite_deployment(path: Path) -> None:
    store = SqlStore(path)
    await store.open()
    try:
        conversation = await store.create_conversation("console", "default", None)
        for n in range(3):
            raw = RawMessage("console", f"m{n}", "alice", {"text": f"hi {n} 100%"}, time.time())
            await store.accept_inbound(raw)
        await store.approvals.add_member("matrix", "!r:hs", "@u:hs", "@owner:hs")
        await store.update_conversation(conversation.id, agent_session_id="s-1")
    finally:
        await store.close()


def test_copy_verifies_counts_and_refuses_a_target_with_rows(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "state.db"
    asyncio.run(a_sqlite_deployment(source))

    assert main(["state", "copy", "--from", f"sqlite://{source}", "--to", postgres_url]) == 0
    out = capsys.readouterr().out
    assert any(line.split() == ["tasks", "3", "3"] for line in out.splitlines()), out
    assert any(line.split() == ["room_members", "1", "1"] for line in out.splitlines()), out
    assert "every table's row count matches" in out
    copied = asyncio.run(rows(postgres_url, "SELECT message_id FROM tasks ORDER BY rowid"))
    assert copied == [("m0",), ("m1",), ("m2",)]

    # A second copy would double nothing: it is refused, and the target is unchanged.
    assert main(["state", "copy", "--from", f"sqlite://{source}", "--to", postgres_url]) == 1
    assert "already holds rows" in capsys.readouterr().err
    assert (
        main(["state", "copy", "--from", f"sqlite://{source}", "--to", postgres_url, "--replace"])
        == 0
    )
    assert asyncio.run(rows(postgres_url, "SELECT COUNT(*) FROM tasks")) == [(3,)]

    # The copy goes on where SQLite stopped: a new task sorts after the copied ones.
    async def accept_one_more() -> None:
        store = SqlStore(postgres_url)
        await store.open()
        try:
            await store.accept_inbound(RawMessage("console", "m3", "alice", {}, time.time()))
            listed = await store.list_tasks()
            assert [t.message_id for t in listed] == ["m0", "m1", "m2", "m3"]
        finally:
            await store.close()

    asyncio.run(accept_one_more())


def test_a_console_deployment_moves_to_postgresql_and_resumes_its_conversation(
    gateway,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    postgres_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = write_config(tmp_path, target_repo, fake_api)
    first = gateway("chat", "--config", str(config))
    banner = first.expect(r"^gateway-bot console · conversation default \(([0-9a-f]{8})\)")
    first.send("remember the word PINEAPPLE")
    first.expect(r"^agent> Echo: .*PINEAPPLE")
    first.finish()

    sqlite_file = tmp_path / "state" / "state.db"
    assert main(["state", "copy", "--from", f"sqlite://{sqlite_file}", "--to", postgres_url]) == 0
    copied = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert ["conversations", "1", "1"] in copied
    assert ["tasks", "1", "1"] in copied

    with_state_url(config, "GWBT_TEST_STATE_URL")
    second = gateway("chat", "--config", str(config), env={"GWBT_TEST_STATE_URL": postgres_url})
    resumed = second.expect(r"^gateway-bot console · conversation default \(([0-9a-f]{8})\)")
    assert resumed == banner, "the same conversation, named by its id both times"
    second.send("what was the word?")
    second.expect(r"^agent> Echo: .*what was the word\?")
    second.finish()

    history = " ".join(fake_api.user_texts(fake_api.requests[-1]))
    assert "PINEAPPLE" in history, "the resumed session must carry the first message"
    assert asyncio.run(rows(postgres_url, "SELECT COUNT(*) FROM tasks")) == [(2,)]
    assert asyncio.run(rows(sqlite_file, "SELECT COUNT(*) FROM tasks")) == [(1,)], (
        "the restarted daemon wrote to PostgreSQL, not to the old file"
    )
    # status reads the database the config names.
    monkeypatch.setenv("GWBT_TEST_STATE_URL", postgres_url)
    capsys.readouterr()
    assert main(["status", "--config", str(config), "--json"]) == 0
    finished = json.loads(capsys.readouterr().out)["tasks"]["finished"]
    assert len(finished) == 2


def test_an_unreachable_database_is_told_plainly_without_its_password(
    tmp_path: Path,
    postgres_server: PostgresServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "gateway-bot.yaml"
    config.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"), "repo": {"url": "."}}))
    with_state_url(config, "GWBT_TEST_STATE_URL")
    url = f"postgresql://gateway:s3cr3t-pw@127.0.0.1:{postgres_server.port}/no_such_db"
    monkeypatch.setenv("GWBT_TEST_STATE_URL", url)

    assert main(["migrate", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert "cannot open the PostgreSQL state database" in err
    assert "no_such_db" in err
    assert "s3cr3t-pw" not in err
