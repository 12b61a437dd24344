"""Action approval cards in real channels with the real daemon and CLI (decision 0087).

In the Matrix room (real Synapse) where the agent works, a stranger's reaction decides
nothing and the asker's ✅ lets the push run (the repo's config, which tries to allow
pushes, is ignored). In a Slack thread (fake Slack), Always lets the identical push run
again without a card, another thread (another conversation) still asks, and a forged press
from another team decides nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.agents.test_action_approvals_claude import PUSH, _bare_remote, _remote_log
from tests.integration.schedules.test_schedules_channels import card_buttons
from tests.integration.slack.test_slack_daemon import ALICE, GENERAL, MENTION, people, slack_config
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import OTHER_TEAM, FakeSlack
from tests.support.synapse_fixtures import (
    SynapseServer,
    bot_edit,
    bot_text,
    matrix_config,
    membership,
)

pytestmark = pytest.mark.slow

APPROVALS = {"agent": {"approvals": {}, "timeout_seconds": 120}}


def _reaction(event_id: str, key: str) -> dict[str, Any]:
    return {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}


async def test_matrix_card_shows_the_command_a_strangers_reaction_does_nothing_allow_pushes(
    gateway: Any,
    meet: Any,
    synapse: SynapseServer,
    tmp_path: Path,
    fake_api: FakeAnthropic,
) -> None:
    loosening = "approvals:\n  rules:\n    - {tool: Bash, command: 'git push*', action: allow}\n"
    remote = _bare_remote(tmp_path, {".gateway/config.yaml": loosening})
    alice, mallory = await meet("alice"), await meet("mallory")
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id, mallory.user_id], name="Pushes")
    await mallory.join(room)
    config = matrix_config(
        tmp_path, remote, fake_api, synapse, bot, [alice.user_id], sections=APPROVALS
    )
    daemon = gateway("run", "--config", str(config))
    await alice.wait_for(room, membership(bot.user_id, "join"))

    await alice.say(room, f"RUN_BASH {PUSH}", mention=bot.user_id)
    card = await alice.wait_for(room, bot_text(bot.user_id, r"The agent asks to run"))
    assert f"$ {PUSH}" in card["content"]["body"]
    assert 'Bash "git push' in card["content"]["body"]
    await alice.wait_for(
        room,
        lambda e: (
            e.get("type") == "m.reaction"
            and e.get("sender") == bot.user_id
            and (e.get("content") or {}).get("m.relates_to", {}).get("event_id") == card["event_id"]
        ),
    )
    # Mallory is in the room but not allowed, and did not ask: her ✅ decides nothing.
    await mallory.send(room, "m.reaction", _reaction(card["event_id"], "✅"))
    await alice.say(room, "!status")
    await alice.wait_for(room, bot_text(bot.user_id, r"Waiting for approval: git"))
    assert "approved-push" not in _remote_log(remote)

    await alice.send(room, "m.reaction", _reaction(card["event_id"], "✅"))
    await alice.wait_for(room, bot_edit(bot.user_id, card["event_id"], r"Allowed by"))
    await alice.wait_for(room, bot_text(bot.user_id, r"Echo: RUN_BASH git"))
    assert _remote_log(remote).splitlines()[0] == "approved-push"
    assert daemon.process.poll() is None, daemon.stderr
    # The repo's own rule would have let the push run unasked: ignored, and said so.
    assert "ignored the repo's approvals rule" in daemon.stderr


def test_slack_always_forged_clicks_and_another_thread(
    gateway: Any, tmp_path: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    remote = _bare_remote(tmp_path)
    people(fake_slack)
    config = slack_config(tmp_path, remote, fake_api, fake_slack)
    _enable_approvals(config)
    daemon = gateway("run", "--config", str(config))
    fake_slack.wait_connected(1)

    root = fake_slack.user_says(ALICE, GENERAL, f"{MENTION} RUN_BASH {PUSH}")
    card = fake_slack.wait_until(
        lambda: next((m for m in fake_slack.bot_posts(GENERAL, root) if card_buttons(m)), None),
        what="the action card in the thread",
    )
    shown = card["blocks"][0]["text"]["text"].replace("&amp;", "&")  # mrkdwn escapes &
    assert f"$ {PUSH}" in shown
    always = next(a for a in card_buttons(card) if a.endswith(":always"))
    # The same user id, pressed from another workspace: refused by the channel.
    fake_slack.click(ALICE, GENERAL, card["ts"], always, team=OTHER_TEAM)
    fake_slack.user_says(ALICE, GENERAL, "!status", thread_ts=root)
    fake_slack.wait_for_reply(GENERAL, root, "Waiting for approval: git")
    assert "approved-push" not in _remote_log(remote)

    fake_slack.click(ALICE, GENERAL, card["ts"], always)
    fake_slack.wait_for_reply(GENERAL, root, "Echo: RUN_BASH git")
    assert _remote_log(remote).count("approved-push") == 1

    # The identical push again in this thread: no card.
    fake_slack.user_says(ALICE, GENERAL, f"{MENTION} RUN_BASH {PUSH}", thread_ts=root)
    fake_slack.wait_until(
        lambda: sum("Echo: RUN_BASH git" in t for t in fake_slack.texts(GENERAL, root)) == 2,
        what="the second push's reply",
    )
    assert sum(bool(card_buttons(m)) for m in fake_slack.bot_posts(GENERAL, root)) == 0
    assert _remote_log(remote).count("approved-push") == 2
    fake_slack.user_says(ALICE, GENERAL, "!rules", thread_ts=root)
    fake_slack.wait_for_reply(GENERAL, root, "Allowed always in this conversation")

    # Another thread is another conversation: it asks again.
    other = fake_slack.user_says(ALICE, GENERAL, f"{MENTION} RUN_BASH {PUSH}")
    fake_slack.wait_until(
        lambda: next((m for m in fake_slack.bot_posts(GENERAL, other) if card_buttons(m)), None),
        what="a card in the other thread",
    )
    assert daemon.process.poll() is None, daemon.stderr


def _enable_approvals(config: Path) -> None:
    import yaml

    data = yaml.safe_load(config.read_text())
    data["agent"]["approvals"] = {}
    config.write_text(yaml.safe_dump(data))
