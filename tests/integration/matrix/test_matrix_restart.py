"""The daemon restarts while messages arrive: each is answered exactly once, and nothing
said in the room before the bot joined is ever taken as a task."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fake_anthropic import FakeAnthropic
from tests.support.synapse_fixtures import (
    SynapseServer,
    bot_edit,
    bot_text,
    matrix_config,
    membership,
    relation_of,
)

pytestmark = pytest.mark.slow

WORDS = ["FIRST", "SECOND", "THIRD", "FOURTH", "FIFTH"]


async def test_restart_answers_each_message_once_and_never_history(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice = await meet("alice")
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id])
    await alice.say(room, "OLD-HISTORY from before the bot joined")
    # One event per sync timeline: whatever else was missed must come through the gap.
    config = matrix_config(
        tmp_path, target_repo, fake_api, synapse, bot, [alice.user_id], sync_timeline_limit=1
    )
    first = gateway("run", "--config", str(config))
    await alice.wait_for(room, membership(bot.user_id, "join"))
    await alice.say(room, "FIRST message")
    await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*FIRST message"))

    fake_api.hold("SECOND")
    second = await alice.say(room, "SECOND message")
    assert fake_api.wait_for_held(60), "the agent never started on SECOND"
    # Killed once SECOND's acknowledgement is out (a loaded machine may start the agent
    # before it shows): the restart must keep that one, not send another.
    await alice.wait_for(
        room,
        lambda e: (
            bot_text(bot.user_id, r"^Working on it…$")(e)
            and relation_of(e).get("m.in_reply_to", {}).get("event_id") == second
        ),
    )
    first.kill()
    for word in WORDS[2:]:
        await alice.say(room, f"{word} message")
    fake_api.release()

    gateway("run", "--config", str(config))
    for word in WORDS[1:]:
        await alice.wait_for(room, bot_text(bot.user_id, rf"Echo: .*{word} message"))

    history = await alice.history(room)
    for word in WORDS:
        echoes = [e for e in history if bot_text(bot.user_id, rf"Echo: .*{word} message")(e)]
        assert len(echoes) == 1, f"{word}: {len(echoes)} replies"
    assert not any(bot_text(bot.user_id, r"OLD-HISTORY")(e) for e in history)
    asked = " ".join(" ".join(fake_api.user_texts(r)) for r in fake_api.requests)
    assert "OLD-HISTORY" not in asked

    # The interrupted task kept its acknowledgement: the restart edited it, never re-sent it.
    acks = [
        e
        for e in history
        if bot_text(bot.user_id, r"^Working on it…$")(e)
        and relation_of(e).get("m.in_reply_to", {}).get("event_id") == second
    ]
    assert len(acks) == 1
    assert any(bot_edit(bot.user_id, acks[0]["event_id"], r"^Done")(e) for e in history)
