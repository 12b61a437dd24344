"""Scheduled runs fire in real channels with the real daemon: a one-off run posts once, in
the Slack thread (fake Slack) or the Matrix room (real Synapse) it was made in. The agent's
schedule request is a card there: a stranger's press changes nothing, the asker's Allow
creates the schedule.

Time is moved with the schedules' test clock (``core/schedules/test_clock.py``): the test
writes a number of seconds into a file the daemon was told about, so a run due "in 2
hours" is due now."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from gateway_bot.core.schedules.test_clock import TEST_CLOCK_ENV
from tests.integration.slack.test_slack_daemon import (
    ALICE,
    BOB,
    GENERAL,
    MENTION,
    people,
    slack_config,
)
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import FakeSlack
from tests.support.synapse_fixtures import (
    SynapseServer,
    bot_edit,
    bot_text,
    matrix_config,
    membership,
)

LATER = 2 * 3600 + 120
"""Seconds the clock moves: past a run made "in 2 hours"."""


def moved_clock(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    clock = tmp_path / "schedule-clock"
    clock.write_text("0")
    return clock, {TEST_CLOCK_ENV: str(clock)}


def card_buttons(message: dict[str, Any]) -> list[str]:
    return [
        e["action_id"]
        for b in message.get("blocks") or []
        if b["type"] == "actions"
        for e in b["elements"]
    ]


def test_slack_agent_request_allowed_by_the_asker_fires_once_in_its_thread(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    people(fake_slack)
    clock, env = moved_clock(tmp_path)
    config = slack_config(tmp_path, target_repo, fake_api, fake_slack)
    daemon = gateway("run", "--config", str(config), env=env)
    fake_slack.wait_connected(1)

    request = {"when": "in 2 hours", "prompt": "SLACK-PING check the build"}
    root = fake_slack.user_says(
        ALICE,
        GENERAL,
        f"{MENTION} WRITE_FILE name=../outbox/schedule.json text={json.dumps(request)}",
    )
    card = fake_slack.wait_until(
        lambda: next((m for m in fake_slack.bot_posts(GENERAL, root) if card_buttons(m)), None),
        what="the schedule request card in the thread",
    )
    assert card["thread_ts"] == root
    allow = next(a for a in card_buttons(card) if a.endswith(":allow"))
    assert allow.startswith("schedule:")
    assert "SLACK-PING check the build" in card["blocks"][0]["text"]["text"]

    # Bob is in the workspace but not allowed here, and did not ask: his press is ignored.
    fake_slack.click(BOB, GENERAL, card["ts"], allow)
    listed = fake_slack.user_says(ALICE, GENERAL, "!schedules", thread_ts=root)
    fake_slack.wait_for_reply(GENERAL, root, "No schedules in this conversation")
    assert listed
    assert card_buttons(next(m for m in fake_slack.thread(GENERAL, root) if m["ts"] == card["ts"]))

    fake_slack.click(ALICE, GENERAL, card["ts"], allow)
    decided = fake_slack.wait_until(
        lambda: next(
            (
                m
                for m in fake_slack.thread(GENERAL, root)
                if m["ts"] == card["ts"] and "Scheduled #1" in m["blocks"][0]["text"]["text"]
            ),
            None,
        ),
        what="the card closed as allowed",
    )
    assert not card_buttons(decided)
    assert "Allowed by Alice" in decided["blocks"][0]["text"]["text"]

    clock.write_text(str(LATER))
    fake_slack.wait_for_reply(GENERAL, root, "Scheduled run #1 (due ")
    fake_slack.wait_for_reply(GENERAL, root, "Echo: SLACK-PING check the build")

    # Later still, and after another message: the one-off ran once.
    clock.write_text(str(LATER * 3))
    again = fake_slack.user_says(ALICE, GENERAL, f"{MENTION} anything else?", thread_ts=root)
    fake_slack.wait_for_reply(GENERAL, root, "Echo: anything else?")
    texts = fake_slack.texts(GENERAL, root)
    assert sum("Scheduled run #1" in t for t in texts) == 1, texts
    assert sum("Echo: SLACK-PING" in t for t in texts) == 1, texts
    assert again
    assert all(
        m.get("thread_ts") == root for m in fake_slack.messages[GENERAL] if m["ts"] != root
    ), "everything stayed in the thread"
    assert daemon.process.poll() is None, daemon.stderr


async def test_matrix_one_off_run_fires_once_in_its_room(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice = await meet("alice")
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id], name="Schedules room")
    other = await alice.create_room([bot.user_id], name="Another room")
    clock, env = moved_clock(tmp_path)
    config = matrix_config(tmp_path, target_repo, fake_api, synapse, bot, [alice.user_id])
    daemon = gateway("run", "--config", str(config), env=env)
    await alice.wait_for(room, membership(bot.user_id, "join"))
    await alice.wait_for(other, membership(bot.user_id, "join"))

    await alice.say(room, "!schedule in 2 hours MATRIX-PING look at the queue")
    await alice.wait_for(room, bot_text(bot.user_id, r"^Scheduled #1: once at "))
    await alice.say(other, "!status")
    await alice.wait_for(other, bot_text(bot.user_id, r"Nothing is running"))

    clock.write_text(str(LATER))
    await alice.wait_for(room, bot_text(bot.user_id, r"^Scheduled run #1 \(due "))
    ack = await alice.wait_for(room, bot_text(bot.user_id, r"^Working on it…$"))
    await alice.wait_for(room, bot_text(bot.user_id, r"Echo: MATRIX-PING look at the queue"))
    await alice.wait_for(room, bot_edit(bot.user_id, ack["event_id"], r"^Done"))

    clock.write_text(str(LATER * 3))
    await alice.say(room, "!schedules")
    await alice.wait_for(room, bot_text(bot.user_id, r"No schedules in this conversation"))
    history = await alice.history(room)
    runs = [e for e in history if bot_text(bot.user_id, r"Scheduled run #1")(e)]
    assert len(runs) == 1, "the one-off ran once"
    elsewhere = await alice.history(other)
    assert not [e for e in elsewhere if bot_text(bot.user_id, r"Scheduled run|MATRIX-PING")(e)]
    assert daemon.process.poll() is None, daemon.stderr


async def test_matrix_run_of_a_user_removed_from_allowed_users_does_not_run(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    """Alice schedules while allowed; the owner takes her out of ``allowed_users`` and
    restarts: her run is dropped (the homeserver is asked again, not the old verdict)."""
    alice = await meet("alice")
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id], name="Removed room")
    clock, env = moved_clock(tmp_path)
    config = matrix_config(tmp_path, target_repo, fake_api, synapse, bot, [alice.user_id])
    first = gateway("run", "--config", str(config), env=env)
    await alice.wait_for(room, membership(bot.user_id, "join"))
    await alice.say(room, "!schedule in 2 hours MATRIX-GONE delete the branch")
    await alice.wait_for(room, bot_text(bot.user_id, r"^Scheduled #1: once at "))
    first.terminate()

    matrix_config(tmp_path, target_repo, fake_api, synapse, bot, ["@someone-else:localhost"])
    clock.write_text(str(LATER))
    second = gateway("run", "--config", str(config), env=env)
    deadline = time.monotonic() + 120
    while "dropped scheduled run from unapproved sender" not in second.stderr:
        assert time.monotonic() < deadline, f"the run was never dropped:\n{second.stderr}"
        await asyncio.sleep(0.2)
    history = await alice.history(room)
    assert not [e for e in history if bot_text(bot.user_id, r"Echo: MATRIX-GONE")(e)]
    assert "MATRIX-GONE" not in json.dumps(fake_api.requests), "the agent never saw it"


def _reaction(event_id: str, key: str) -> dict[str, Any]:
    return {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}


async def test_matrix_agent_request_card_a_strangers_reaction_does_nothing_deny_drops_it(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice, mallory = await meet("alice"), await meet("mallory")
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id, mallory.user_id], name="Team")
    await mallory.join(room)
    config = matrix_config(tmp_path, target_repo, fake_api, synapse, bot, [alice.user_id])
    gateway("run", "--config", str(config))
    await alice.wait_for(room, membership(bot.user_id, "join"))

    request = {"when": "every day at 9:00", "prompt": "MATRIX-ASK nightly", "tz": "Asia/Tokyo"}
    await alice.say(
        room,
        f"WRITE_FILE name=../outbox/schedule.json text={json.dumps(request)}",
        mention=bot.user_id,
    )
    card = await alice.wait_for(room, bot_text(bot.user_id, r"The agent asks to schedule a run"))
    assert "MATRIX-ASK nightly" in card["content"]["body"]
    assert "Asia/Tokyo" in card["content"]["body"]
    await alice.wait_for(
        room,
        lambda e: (
            e.get("type") == "m.reaction"
            and e.get("sender") == bot.user_id
            and (e.get("content") or {}).get("m.relates_to", {}).get("event_id") == card["event_id"]
        ),
    )
    # Mallory is in the room but neither allowed nor the asker: her ✅ creates nothing.
    await mallory.send(room, "m.reaction", _reaction(card["event_id"], "✅"))
    await alice.say(room, "!schedules")
    await alice.wait_for(room, bot_text(bot.user_id, r"No schedules in this conversation"))

    await alice.send(room, "m.reaction", _reaction(card["event_id"], "❌"))
    await alice.wait_for(room, bot_edit(bot.user_id, card["event_id"], r"Denied by"))
    await alice.say(room, "!status")  # answered after the reaction (intake keeps order)
    await alice.wait_for(room, bot_text(bot.user_id, r"Nothing is running"))
    history = await alice.history(room)
    assert not [e for e in history if bot_text(bot.user_id, r"Scheduled #")(e)]
    listed = [e for e in history if bot_text(bot.user_id, r"^Schedules in this")(e)]
    assert not listed
