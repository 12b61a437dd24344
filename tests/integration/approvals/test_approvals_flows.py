"""Approvals and engagement as people live them in Matrix: strangers held until the owner
decides, decisions that only owners make, restarts in between, invitations, and messages
that were not for the bot handed over as context."""

from __future__ import annotations

import re

from tests.support import approval_office
from tests.support.approval_office import card_ready, localpart, reaction
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.synapse_fixtures import bot_edit, bot_text, membership

office = approval_office.office


async def test_one_card_for_three_messages_only_the_owner_decides_all_three_run(
    office, fake_api: FakeAnthropic
) -> None:
    o = await office()
    alice, mallory, eve, desk, team = o.alice, o.mallory, o.eve, o.desk, o.team
    bot = o.bot

    for n in (1, 2, 3):
        await mallory.say(team, f"STRANGER-{n} please", mention=bot)
    card = await card_ready(alice, desk, bot, r"Unknown sender in Team")
    # Allow runs only what the card quotes: the owner decides once it quotes all three.
    await alice.wait_for(desk, bot_edit(bot, card["event_id"], r"wrote 3 messages.*STRANGER-3"))
    await eve.send(desk, "m.reaction", reaction(card["event_id"], "✅"))  # not an owner
    await alice.send(desk, "m.reaction", reaction(card["event_id"], "✅"))

    for n in (1, 2, 3):
        await mallory.wait_for(team, bot_text(bot, rf"Echo: STRANGER-{n} please"))
    edit = await alice.wait_for(desk, bot_edit(bot, card["event_id"], r"Allowed by"))
    body = str(edit["content"]["body"])
    assert localpart(alice.user_id) in body
    assert localpart(eve.user_id) not in body, "the third user's tap must not decide"

    history = await alice.history(desk)
    cards = [e for e in history if bot_text(bot, r"Unknown sender in Team")(e)]
    assert len(cards) == 1, "one card per (room, sender) while pending"
    answers = [
        str(e["content"]["body"])
        for e in await mallory.history(team)
        if bot_text(bot, r"Echo: STRANGER-")(e)
    ]
    assert [re.search(r"STRANGER-\d", a).group(0) for a in answers] == [  # type: ignore[union-attr]
        "STRANGER-1",
        "STRANGER-2",
        "STRANGER-3",
    ]


async def test_deny_drops_the_held_message(office, fake_api: FakeAnthropic) -> None:
    o = await office()
    alice, mallory, desk, team = o.alice, o.mallory, o.desk, o.team
    bot = o.bot

    await mallory.say(team, "DENIED-WORK please", mention=bot)
    card = await card_ready(alice, desk, bot, r"Unknown sender in Team")
    await alice.send(desk, "m.reaction", reaction(card["event_id"], "❌"))
    await alice.wait_for(desk, bot_edit(bot, card["event_id"], r"Denied by"))
    # Intake is in order: once the owner's later message is answered, the denied one is
    # long settled.
    await alice.say(team, "OWNER-CHECK", mention=bot)
    await alice.wait_for(team, bot_text(bot, r"Echo: OWNER-CHECK"))
    assert not any(bot_text(bot, r"DENIED-WORK")(e) for e in await alice.history(team))


async def test_restarts_around_the_decision_lose_nothing(
    office, gateway, fake_api: FakeAnthropic
) -> None:
    o = await office()
    alice, mallory, eve, desk, team = o.alice, o.mallory, o.eve, o.desk, o.team
    bot, config, daemon = o.bot, o.config, o.daemon

    # Restart between the card and the decision.
    await mallory.say(team, "BEFORE-RESTART please", mention=bot)
    card = await card_ready(alice, desk, bot, r"Unknown sender in Team")
    daemon.kill()
    daemon = gateway("run", "--config", str(config))
    await alice.send(desk, "m.reaction", reaction(card["event_id"], "✅"))
    await mallory.wait_for(team, bot_text(bot, r"Echo: BEFORE-RESTART please"))

    # A decision made while the daemon is down is applied when it is back.
    other = await alice.create_room([bot, eve.user_id], name="Other")
    await eve.join(other)
    await alice.wait_for(other, membership(bot, "join"))
    stranger = mallory
    await alice.client.room_invite(other, stranger.user_id)
    await stranger.join(other)
    await stranger.say(other, "WHILE-DOWN please", mention=bot)
    second = await card_ready(alice, desk, bot, r"Unknown sender in Other")
    daemon.kill()
    await alice.send(desk, "m.reaction", reaction(second["event_id"], "✅"))
    gateway("run", "--config", str(config))
    await stranger.wait_for(other, bot_text(bot, r"Echo: WHILE-DOWN please"))
    cards = [e for e in await alice.history(desk) if bot_text(bot, r"Unknown sender")(e)]
    assert len(cards) == 2, "a restart must not send a second card"


async def test_an_invitation_from_a_stranger_is_joined_on_the_owners_word(
    office, fake_api: FakeAnthropic
) -> None:
    o = await office()
    alice, mallory, desk = o.alice, o.mallory, o.desk
    bot = o.bot

    lab = await mallory.create_room([bot], name="Mallory lab")
    card = await alice.wait_for(desk, bot_text(bot, r"Invitation to Mallory lab"))
    code = re.search(r"!approve (\w+)", str(card["content"]["body"]))
    assert code is not None, card["content"]["body"]
    await alice.say(desk, f"!approve {code.group(1)}")
    await mallory.wait_for(lab, membership(bot, "join"))
    await alice.wait_for(desk, bot_edit(bot, card["event_id"], r"Joined by"))


async def test_messages_not_for_the_bot_become_context_for_the_next_one(
    office, fake_api: FakeAnthropic
) -> None:
    o = await office(rooms=[{"engage": "mention", "ignored": "accumulate", "context_size": 2}])
    alice, bot, team = o.alice, o.bot, o.team

    for text in ("the build broke at noon", "it was the cache", "cache key is CK-42"):
        await alice.say(team, text)
    await alice.say(team, "ACT-NOW what do you make of it?", mention=bot)
    await alice.wait_for(team, bot_text(bot, r"Echo: .*ACT-NOW"))

    prompt = " ".join(fake_api.user_texts(fake_api.requests[-1]))
    assert "[context]" in prompt
    assert "cache key is CK-42" in prompt
    assert "it was the cache" in prompt
    assert "the build broke at noon" not in prompt, "only the last context_size are kept"
    assert len(fake_api.requests) == 2, "the ignored messages ran no task of their own"
