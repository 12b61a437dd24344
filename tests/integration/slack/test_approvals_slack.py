"""Strangers on Slack against the real daemon and the fake Slack: chatter among people the
bot does not know is never carded, a second mention edits the pending card (buttons kept)
instead of sending another, the card names the channel by id, and /revoke (typed as
``!revoke <@U…>``) sends the next message back to the owner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.integration.slack.test_slack_daemon import (
    ALICE,
    APPROVALS,
    BOB,
    CAROL,
    GENERAL,
    MENTION,
    people,
    slack_config,
    start_socket_daemon,
)
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import FakeSlack

ACCESS = {
    "owners": {"slack": [ALICE]},
    "approval_destination": {"channel": "slack", "context": {"channel": APPROVALS}},
}


def card_text(card: dict[str, Any]) -> str:
    return str(card["blocks"][0]["text"]["text"])


def buttons(card: dict[str, Any]) -> list[str]:
    return [e["action_id"] for b in card["blocks"] if b["type"] == "actions" for e in b["elements"]]


def test_only_mentions_are_carded_one_card_grows_and_revoke_sends_them_back(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    people(fake_slack)
    config = slack_config(tmp_path, target_repo, fake_api, fake_slack, access=ACCESS)
    start_socket_daemon(gateway, fake_slack, config)

    fake_slack.user_says(BOB, GENERAL, "BOB-PRIVATE lunch at noon?")
    fake_slack.user_says(CAROL, GENERAL, "CAROL-PRIVATE sure, the usual place")
    first = fake_slack.user_says(BOB, GENERAL, f"{MENTION} BOB-ASK one")
    card = fake_slack.wait_until(
        lambda: next(iter(fake_slack.messages[APPROVALS]), None), what="an approval card"
    )
    second = fake_slack.user_says(BOB, GENERAL, f"{MENTION} BOB-ASK two")
    card = fake_slack.wait_until(
        lambda: next(
            (m for m in fake_slack.messages[APPROVALS] if "BOB-ASK two" in card_text(m)), None
        ),
        what="the card edited to quote the second message",
    )
    text = card_text(card)
    assert "BOB-ASK one" in text
    assert "PRIVATE" not in text, "chatter that did not address the bot was carded"
    assert GENERAL in text, "the card names the channel by its id"
    assert len(fake_slack.messages[APPROVALS]) == 1, "one card per sender and room"
    allow = next(a for a in buttons(card) if a.endswith("allow"))  # the edit kept its buttons
    fake_slack.click(ALICE, APPROVALS, card["ts"], allow)
    fake_slack.wait_for_reply(GENERAL, first, "Echo: BOB-ASK one")
    fake_slack.wait_for_reply(GENERAL, second, "Echo: BOB-ASK two")

    # A stranger's command is dropped unanswered, and takes nothing back.
    fake_slack.user_says(CAROL, GENERAL, f"!revoke <@{BOB}> everywhere")
    still = fake_slack.user_says(BOB, GENERAL, f"{MENTION} BOB-ASK still")
    fake_slack.wait_for_reply(GENERAL, still, "Echo: BOB-ASK still")
    revoke = fake_slack.user_says(ALICE, GENERAL, f"!revoke <@{BOB}> everywhere")
    fake_slack.wait_for_reply(GENERAL, revoke, f"Revoked {BOB}'s approval in")
    fake_slack.user_says(BOB, GENERAL, f"{MENTION} BOB-ASK three")
    fake_slack.wait_until(
        lambda: next(
            (m for m in fake_slack.messages[APPROVALS] if "BOB-ASK three" in card_text(m)), None
        ),
        what="a new card after the revocation",
    )
    assert len(fake_slack.messages[APPROVALS]) == 2
    prompts = " ".join(" ".join(fake_api.user_texts(r)) for r in fake_api.requests)
    assert "PRIVATE" not in prompts
    assert "BOB-ASK three" not in prompts
