"""Approvals through Matrix, end to end: a stranger's message and a stranger's invite reach
the owner as cards in their room; the owner's reaction decides, and the bot acts on it."""

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


def _reaction(event_id: str, key: str) -> dict[str, object]:
    return {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}


async def test_the_owner_allows_a_stranger_and_ignores_an_invite_by_reacting(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice, mallory, eve = await meet("alice"), await meet("mallory"), await meet("eve")
    bot = await synapse.register("bot")
    desk = await alice.create_room([bot.user_id], name="Owner desk")
    team = await alice.create_room([bot.user_id, mallory.user_id], name="Team")
    await mallory.join(team)
    access = {
        "owners": {"matrix": [alice.user_id]},
        "approval_destination": {"channel": "matrix", "context": {"room_id": desk}},
    }
    config = matrix_config(
        tmp_path,
        target_repo,
        fake_api,
        synapse,
        bot,
        [alice.user_id],
        sections={"access": access},
    )
    gateway("run", "--config", str(config))
    await alice.wait_for(team, membership(bot.user_id, "join"))
    await alice.wait_for(desk, membership(bot.user_id, "join"))

    await mallory.say(team, "MALLORY-REQUEST please run", mention=bot.user_id)
    card = await alice.wait_for(desk, bot_text(bot.user_id, r"Unknown sender in Team"))
    assert "MALLORY-REQUEST" in card["content"]["body"]
    await alice.wait_for(
        desk,
        lambda e: (
            e.get("type") == "m.reaction"
            and e.get("sender") == bot.user_id
            and relation_of(e).get("event_id") == card["event_id"]
        ),
    )
    await alice.send(desk, "m.reaction", _reaction(card["event_id"], "✅"))
    await alice.wait_for(team, bot_text(bot.user_id, r"Echo: .*MALLORY-REQUEST"))
    await alice.wait_for(desk, bot_edit(bot.user_id, card["event_id"], r"Allowed"))

    lair = await eve.create_room([bot.user_id], name="Eve's lair")
    invite = await alice.wait_for(desk, bot_text(bot.user_id, r"Invitation to Eve's lair"))
    await alice.send(desk, "m.reaction", _reaction(invite["event_id"], "❌"))
    await eve.wait_for(lair, membership(bot.user_id, "leave"))
