"""Approvals and engagement as people live them in Matrix: strangers held until the owner
decides, decisions that only owners make, restarts in between, invitations, and messages
that were not for the bot handed over as context."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.fake_anthropic import FakeAnthropic
from tests.synapse_fixtures import (
    Human,
    SynapseServer,
    bot_edit,
    bot_text,
    matrix_config,
    membership,
    relation_of,
)


def reaction(event_id: str, key: str) -> dict[str, object]:
    return {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}


def localpart(user_id: str) -> str:
    return user_id[1:].split(":")[0]


async def card_ready(owner: Human, desk: str, bot: str, pattern: str) -> dict[str, Any]:
    """The card, once the bot's own ✅ and ❌ are on it (so a tap has something to press)."""
    card = await owner.wait_for(desk, bot_text(bot, pattern))
    for key in ("✅", "❌"):
        await owner.wait_for(
            desk,
            lambda e, key=key: (
                e.get("type") == "m.reaction"
                and e.get("sender") == bot
                and relation_of(e).get("event_id") == card["event_id"]
                and relation_of(e).get("key") == key
            ),
        )
    return card


async def setting(
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    repo: Path,
    api: FakeAnthropic,
    rooms: list[dict[str, Any]] | None = None,
) -> tuple[Human, Human, Human, Any, str, str, Path]:
    """alice owns the bot; mallory is in the team room but not allowed; eve is a third user
    who can see the owner's desk. Returns the people, the bot, both rooms and the config."""
    alice, mallory, eve = await meet("alice"), await meet("mallory"), await meet("eve")
    bot = await synapse.register("bot")
    desk = await alice.create_room([bot.user_id, eve.user_id], name="Owner desk")
    await eve.join(desk)
    team = await alice.create_room([bot.user_id, mallory.user_id], name="Team")
    await mallory.join(team)
    access: dict[str, Any] = {
        "owners": {"matrix": [alice.user_id]},
        "approval_destination": {"channel": "matrix", "context": {"room_id": desk}},
        "rooms": [{**room, "match": room.get("match", team)} for room in rooms or []],
    }
    config = matrix_config(
        tmp_path, repo, api, synapse, bot, [alice.user_id, eve.user_id], sections={"access": access}
    )
    return alice, mallory, eve, bot, desk, team, config


async def test_one_card_for_three_messages_only_the_owner_decides_all_three_run(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice, mallory, eve, bot, desk, team, config = await setting(
        meet, synapse, tmp_path, target_repo, fake_api
    )
    gateway("run", "--config", str(config))
    await alice.wait_for(team, membership(bot.user_id, "join"))

    for n in (1, 2, 3):
        await mallory.say(team, f"STRANGER-{n} please", mention=bot.user_id)
    card = await card_ready(alice, desk, bot.user_id, r"Unknown sender in Team")
    await eve.send(desk, "m.reaction", reaction(card["event_id"], "✅"))  # not an owner
    await alice.send(desk, "m.reaction", reaction(card["event_id"], "✅"))

    for n in (1, 2, 3):
        await mallory.wait_for(team, bot_text(bot.user_id, rf"Echo: STRANGER-{n} please"))
    edit = await alice.wait_for(desk, bot_edit(bot.user_id, card["event_id"], r"Allowed by"))
    body = str(edit["content"]["body"])
    assert localpart(alice.user_id) in body
    assert localpart(eve.user_id) not in body, "the third user's tap must not decide"

    history = await alice.history(desk)
    cards = [e for e in history if bot_text(bot.user_id, r"Unknown sender in Team")(e)]
    assert len(cards) == 1, "one card per (room, sender) while pending"
    answers = [
        str(e["content"]["body"])
        for e in await mallory.history(team)
        if bot_text(bot.user_id, r"Echo: STRANGER-")(e)
    ]
    assert [re.search(r"STRANGER-\d", a).group(0) for a in answers] == [  # type: ignore[union-attr]
        "STRANGER-1",
        "STRANGER-2",
        "STRANGER-3",
    ]


async def test_deny_drops_the_held_message(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice, mallory, _eve, bot, desk, team, config = await setting(
        meet, synapse, tmp_path, target_repo, fake_api
    )
    gateway("run", "--config", str(config))
    await alice.wait_for(team, membership(bot.user_id, "join"))

    await mallory.say(team, "DENIED-WORK please", mention=bot.user_id)
    card = await card_ready(alice, desk, bot.user_id, r"Unknown sender in Team")
    await alice.send(desk, "m.reaction", reaction(card["event_id"], "❌"))
    await alice.wait_for(desk, bot_edit(bot.user_id, card["event_id"], r"Denied by"))
    # Intake is in order: once the owner's later message is answered, the denied one is
    # long settled.
    await alice.say(team, "OWNER-CHECK", mention=bot.user_id)
    await alice.wait_for(team, bot_text(bot.user_id, r"Echo: OWNER-CHECK"))
    assert not any(bot_text(bot.user_id, r"DENIED-WORK")(e) for e in await alice.history(team))


async def test_restarts_around_the_decision_lose_nothing(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice, mallory, eve, bot, desk, team, config = await setting(
        meet, synapse, tmp_path, target_repo, fake_api
    )
    daemon = gateway("run", "--config", str(config))
    await alice.wait_for(team, membership(bot.user_id, "join"))

    # Restart between the card and the decision.
    await mallory.say(team, "BEFORE-RESTART please", mention=bot.user_id)
    card = await card_ready(alice, desk, bot.user_id, r"Unknown sender in Team")
    daemon.kill()
    daemon = gateway("run", "--config", str(config))
    await alice.send(desk, "m.reaction", reaction(card["event_id"], "✅"))
    await mallory.wait_for(team, bot_text(bot.user_id, r"Echo: BEFORE-RESTART please"))

    # A decision made while the daemon is down is applied when it is back.
    other = await alice.create_room([bot.user_id, eve.user_id], name="Other")
    await eve.join(other)
    await alice.wait_for(other, membership(bot.user_id, "join"))
    stranger = mallory
    await alice.client.room_invite(other, stranger.user_id)
    await stranger.join(other)
    await stranger.say(other, "WHILE-DOWN please", mention=bot.user_id)
    second = await card_ready(alice, desk, bot.user_id, r"Unknown sender in Other")
    daemon.kill()
    await alice.send(desk, "m.reaction", reaction(second["event_id"], "✅"))
    gateway("run", "--config", str(config))
    await stranger.wait_for(other, bot_text(bot.user_id, r"Echo: WHILE-DOWN please"))
    cards = [e for e in await alice.history(desk) if bot_text(bot.user_id, r"Unknown sender")(e)]
    assert len(cards) == 2, "a restart must not send a second card"


async def test_an_invitation_from_a_stranger_is_joined_on_the_owners_word(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice, mallory, _eve, bot, desk, _team, config = await setting(
        meet, synapse, tmp_path, target_repo, fake_api
    )
    gateway("run", "--config", str(config))
    await alice.wait_for(desk, membership(bot.user_id, "join"))

    lab = await mallory.create_room([bot.user_id], name="Mallory lab")
    card = await alice.wait_for(desk, bot_text(bot.user_id, r"Invitation to Mallory lab"))
    code = re.search(r"!approve (\w+)", str(card["content"]["body"]))
    assert code is not None, card["content"]["body"]
    await alice.say(desk, f"!approve {code.group(1)}")
    await mallory.wait_for(lab, membership(bot.user_id, "join"))
    await alice.wait_for(desk, bot_edit(bot.user_id, card["event_id"], r"Joined by"))


async def test_messages_not_for_the_bot_become_context_for_the_next_one(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice, _mallory, _eve, bot, _desk, team, config = await setting(
        meet,
        synapse,
        tmp_path,
        target_repo,
        fake_api,
        rooms=[{"engage": "mention", "ignored": "accumulate", "context_size": 2}],
    )
    gateway("run", "--config", str(config))
    await alice.wait_for(team, membership(bot.user_id, "join"))

    for text in ("the build broke at noon", "it was the cache", "cache key is CK-42"):
        await alice.say(team, text)
    await alice.say(team, "ACT-NOW what do you make of it?", mention=bot.user_id)
    await alice.wait_for(team, bot_text(bot.user_id, r"Echo: .*ACT-NOW"))

    prompt = " ".join(fake_api.user_texts(fake_api.requests[-1]))
    assert "[context]" in prompt
    assert "cache key is CK-42" in prompt
    assert "it was the cache" in prompt
    assert "the build broke at noon" not in prompt, "only the last context_size are kept"
    assert len(fake_api.requests) == 2, "the ignored messages ran no task of their own"
