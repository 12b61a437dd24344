"""What people on Slack see around the edges, against the real daemon and the fake Slack: a
scheduled run is announced as news (not with the prohibited sign refusals carry), a press
the bot refuses tells the presser alone why, and a click Slack sends with a malformed
``user`` is acknowledged and ignored instead of coming back for ever."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.integration.schedules.test_schedules_channels import LATER, moved_clock
from tests.integration.slack.test_approvals_slack import ACCESS, buttons, card_text
from tests.integration.slack.test_slack_daemon import (
    ALICE,
    APPROVALS,
    BOB,
    CAROL,
    DM,
    GENERAL,
    MENTION,
    people,
    slack_config,
    start_socket_daemon,
)
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import TEAM, FakeSlack


def test_a_scheduled_run_is_announced_as_news_not_as_an_error(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    people(fake_slack)
    clock, env = moved_clock(tmp_path)
    config = slack_config(tmp_path, target_repo, fake_api, fake_slack)
    gateway("run", "--config", str(config), env=env)
    fake_slack.wait_connected(1)

    root = fake_slack.user_says(ALICE, DM, "!schedule in 2 hours SLACK-NEWS check the build")
    fake_slack.wait_for_reply(DM, root, "Scheduled #1")
    clock.write_text(str(LATER))
    notice = fake_slack.wait_for_reply(DM, root, "Scheduled run #1 (due ")
    fake_slack.wait_for_reply(DM, root, "Echo: SLACK-NEWS check the build")

    assert ":no_entry_sign:" not in notice["text"], notice["text"]


def _malformed_click(fake: FakeSlack, channel: str, message_ts: str, action_id: str) -> Any:
    """A block_actions payload as a buggy or forged sender might make it: ``user`` is the
    id itself, not the object Slack documents."""
    return {
        "type": "block_actions",
        "api_app_id": "A0APP",
        "user": ALICE,
        "team": {"id": TEAM, "domain": "fake"},
        "container": {"type": "message", "message_ts": message_ts, "channel_id": channel},
        "channel": {"id": channel},
        "actions": [{"action_id": action_id, "block_id": "gateway_bot_card", "action_ts": "1.2"}],
    }


def test_a_refused_press_is_told_why_and_a_malformed_click_is_acked_and_ignored(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    people(fake_slack)
    config = slack_config(tmp_path, target_repo, fake_api, fake_slack, access=ACCESS)
    daemon = start_socket_daemon(gateway, fake_slack, config)

    asked = fake_slack.user_says(BOB, GENERAL, f"{MENTION} BOB-ASK may I?")
    card = fake_slack.wait_until(
        lambda: next(iter(fake_slack.messages[APPROVALS]), None), what="the approval card"
    )
    allow = next(a for a in buttons(card) if a.endswith("allow"))

    # Carol is no owner: her press changes nothing, and she alone is told why.
    fake_slack.click(CAROL, APPROVALS, card["ts"], allow)
    told = fake_slack.wait_until(
        lambda: fake_slack.ephemerals_for(CAROL), what="a word to Carol only"
    )
    assert told[0]["channel"] == APPROVALS
    assert "Only an owner or admin can decide this card" in told[0]["text"], told
    assert not fake_slack.ephemerals_for(ALICE)
    assert not fake_slack.ephemerals_for(BOB)
    assert len(fake_slack.messages[APPROVALS]) == 1, "no word in the channel itself"

    # A click whose user is a bare id: acknowledged (not redelivered for ever), ignored.
    fake_slack.deliver(_malformed_click(fake_slack, APPROVALS, card["ts"], allow), "socket",
                       interactive=True)  # fmt: skip
    fake_slack.wait_until(lambda: not fake_slack.pending, what="every envelope acknowledged")
    current = next(m for m in fake_slack.messages[APPROVALS] if m["ts"] == card["ts"])
    assert buttons(current), "the malformed click decided nothing"
    # The log line may follow the acknowledgement: wait for it rather than read at once.
    fake_slack.wait_until(lambda: "ignored a Slack click" in daemon.stderr, what="the log line")

    # The owner's press still works, and the daemon is still answering.
    fake_slack.click(ALICE, APPROVALS, card["ts"], allow)
    fake_slack.wait_for_reply(GENERAL, asked, "Echo: BOB-ASK may I?")
    decided = next(m for m in fake_slack.messages[APPROVALS] if m["ts"] == card["ts"])
    assert "Alice" in card_text(decided)
