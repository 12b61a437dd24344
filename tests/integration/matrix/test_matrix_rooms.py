"""Rooms and threads as conversations: two rooms work in parallel, one room answers its
messages in order, and in a room with threads on every thread is its own conversation."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fake_anthropic import FakeAnthropic
from tests.support.synapse_fixtures import (
    Event,
    SynapseServer,
    bot_text,
    matrix_config,
    membership,
    relation_of,
)

pytestmark = pytest.mark.slow


def _index(history: list[Event], matches: object) -> int:
    assert callable(matches)
    return next(i for i, event in enumerate(history) if matches(event))


async def test_two_rooms_in_parallel_and_one_room_in_order(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice = await meet("alice")
    bot = await synapse.register("bot")
    busy = await alice.create_room([bot.user_id], name="Busy room")
    quiet = await alice.create_room([bot.user_id], name="Quiet room")
    config = matrix_config(tmp_path, target_repo, fake_api, synapse, bot, [alice.user_id])
    gateway("run", "--config", str(config))
    await alice.wait_for(busy, membership(bot.user_id, "join"))
    await alice.wait_for(quiet, membership(bot.user_id, "join"))

    fake_api.hold("SLOW-ONE")
    await alice.say(busy, "SLOW-ONE takes a while")
    assert fake_api.wait_for_held(60)
    await alice.say(busy, "NEXT-ONE after it")
    await alice.wait_for(busy, bot_text(bot.user_id, r"^Queued behind 1 task\(s\)\.$"))
    await alice.say(quiet, "QUIET-ONE meanwhile")

    # The quiet room is answered while the busy room's first task is still held.
    await alice.wait_for(quiet, bot_text(bot.user_id, r"Echo: .*QUIET-ONE"))
    assert not any(bot_text(bot.user_id, r"Echo:")(e) for e in alice.seen[busy])
    fake_api.release()

    await alice.wait_for(busy, bot_text(bot.user_id, r"Echo: .*NEXT-ONE"))
    history = await alice.history(busy)
    first = _index(history, bot_text(bot.user_id, r"Echo: .*SLOW-ONE"))
    second = _index(history, bot_text(bot.user_id, r"Echo: .*NEXT-ONE"))
    assert first < second


async def test_each_thread_is_its_own_conversation(
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
    config = matrix_config(
        tmp_path,
        target_repo,
        fake_api,
        synapse,
        bot,
        [alice.user_id],
        rooms={room: {"threads": True}},
    )
    gateway("run", "--config", str(config))
    await alice.wait_for(room, membership(bot.user_id, "join"))

    alpha = await alice.say(room, "topic ALPHA-TOPIC")
    reply = await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*ALPHA-TOPIC"))
    assert relation_of(reply)["rel_type"] == "m.thread"
    assert relation_of(reply)["event_id"] == alpha
    ack = await alice.wait_for(room, bot_text(bot.user_id, r"^Working on it…$"))
    assert relation_of(ack)["event_id"] == alpha

    beta = await alice.say(room, "topic BETA-TOPIC")
    reply = await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*BETA-TOPIC"))
    assert relation_of(reply)["event_id"] == beta

    await alice.say(room, "which topic was this? GAMMA", thread=alpha)
    reply = await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*GAMMA"))
    assert relation_of(reply)["rel_type"] == "m.thread"
    assert relation_of(reply)["event_id"] == alpha
    seen_by_agent = " ".join(fake_api.user_texts(fake_api.requests[-1]))
    assert "ALPHA-TOPIC" in seen_by_agent
    assert "BETA-TOPIC" not in seen_by_agent
