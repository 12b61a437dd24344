"""A stranger's invite on real Synapse is one decision for one intent: a direct chat's card
offers to join and admit the inviter, so their first message there is answered, not carded
again; a group room's Join admits nobody, and a stranger's message there still asks."""

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


async def test_a_direct_invite_joins_and_admits_in_one_decision_a_group_room_does_not(
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
    access = {
        "owners": {"matrix": [alice.user_id]},
        "approval_destination": {"channel": "matrix", "context": {"room_id": desk}},
    }
    config = matrix_config(
        tmp_path, target_repo, fake_api, synapse, bot, [alice.user_id], sections={"access": access}
    )
    gateway("run", "--config", str(config))
    await alice.wait_for(desk, membership(bot.user_id, "join"))

    # Mallory opens a DM with the bot, as Element does; the owner taps the checkmark.
    dm = await mallory.create_room([bot.user_id], direct=True)
    card = await alice.wait_for(desk, bot_text(bot.user_id, r"invited the bot"))
    await alice.wait_for(
        desk,
        lambda e: (
            e.get("type") == "m.reaction"
            and e.get("sender") == bot.user_id
            and relation_of(e).get("event_id") == card["event_id"]
        ),
    )
    await alice.send(desk, "m.reaction", _reaction(card["event_id"], "✅"))
    await mallory.wait_for(dm, membership(bot.user_id, "join"))

    # Her first message in that DM is answered: no second card.
    await mallory.say(dm, "MALLORY-HELLO what can you do?")
    await mallory.wait_for(dm, bot_text(bot.user_id, r"Echo: .*MALLORY-HELLO"))
    await alice.wait_for(desk, bot_edit(bot.user_id, card["event_id"], r"may use the bot there"))
    body = card["content"]["body"]
    assert body.startswith("Direct chat from mallory"), body
    assert "Join and allow: the bot joins and mallory" in body, body
    assert "in one decision" in body, body

    # Eve invites the bot to a group room: joining is one decision, her words another.
    lair = await eve.create_room([bot.user_id], name="Eve's lair")
    invite = await alice.wait_for(desk, bot_text(bot.user_id, r"Invitation to Eve's lair"))
    await alice.send(desk, "m.reaction", _reaction(invite["event_id"], "✅"))
    await eve.wait_for(lair, membership(bot.user_id, "join"))
    await eve.say(lair, "EVE-ASK run this", mention=bot.user_id)
    await alice.wait_for(desk, bot_text(bot.user_id, r"Unknown sender in Eve's lair"))

    cards = [e for e in await alice.history(desk) if bot_text(bot.user_id, r"mallory")(e)]
    assert len(cards) == 1, "one card for Mallory's one intent"
    assert not any(bot_text(bot.user_id, r"Echo:")(e) for e in await eve.history(lair))
