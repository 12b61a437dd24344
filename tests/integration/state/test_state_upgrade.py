"""An existing deployment upgrades in place: the real daemon started on a state directory
made before per-owner migrations (the core's schema in PRAGMA user_version, the Slack
channel's records in their own file) answers as before, with everything in one database."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gateway_bot.channels.slack.records import SLACK_MIGRATIONS
from gateway_bot.state.migrations import MIGRATIONS
from tests.integration.slack.test_slack_daemon import ALICE, GENERAL, MENTION, people, slack_config
from tests.integration.state.test_state_database import make_legacy_database
from tests.integration.state.test_state_retention import make_legacy_slack_file
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import FakeSlack


def test_an_upgraded_slack_deployment_answers_and_keeps_its_records(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    make_legacy_database(state_dir / "state.db", with_tasks=False)
    make_legacy_slack_file(state_dir / "slack" / "slack.db")
    people(fake_slack)
    gateway("run", "--config", str(slack_config(tmp_path, target_repo, fake_api, fake_slack)))
    fake_slack.wait_connected()

    ts = fake_slack.user_says(ALICE, GENERAL, f"{MENTION} still there after the upgrade?")
    fake_slack.wait_for_reply(GENERAL, ts, "Echo: still there after the upgrade?")

    assert not (state_dir / "slack" / "slack.db").exists()
    assert (state_dir / "slack" / "slack.db.migrated").is_file()
    with sqlite3.connect(state_dir / "state.db") as db:
        versions = dict(db.execute("SELECT owner, version FROM schema_versions"))
        imported = db.execute("SELECT ts FROM slack_posts WHERE task_id = 't1'").fetchall()
        threads = db.execute("SELECT thread_ts FROM slack_threads").fetchall()
    # Other owners (schedules...) migrate too; the upgraded ones are at their latest.
    assert versions["core"] == len(MIGRATIONS)
    assert versions["slack"] == len(SLACK_MIGRATIONS)
    assert sorted(imported, key=str) == sorted([("100.1",), (None,)], key=str)
    assert ("100.0",) in threads
    assert (ts,) in threads  # the new thread joined the imported ones
