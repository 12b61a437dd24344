"""Strangers in a shared Matrix room, tried as an attacker or a nosy neighbour would: their
chatter among themselves must never reach the owner's desk or the agent's prompt, a flood
of mentions is one card, Allow runs only what the card showed, their commands do nothing,
and an owner can take an approval back with /revoke."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable

from tests.support import approval_office
from tests.support.approval_office import Office, card_ready, reaction
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.synapse_fixtures import Human, bot_edit, bot_text

office = approval_office.office

CARD = r"Unknown sender in Team"


async def cards_in(o: Office) -> list[str]:
    return [
        str(e["content"]["body"]) for e in await o.alice.history(o.desk) if bot_text(o.bot, CARD)(e)
    ]


async def second_stranger(o: Office, meet: Callable[[str], Awaitable[Human]]) -> Human:
    oscar = await meet("oscar")
    await o.alice.client.room_invite(o.team, oscar.user_id)
    await oscar.join(o.team)
    return oscar


async def test_strangers_chatting_without_the_bot_are_neither_carded_nor_context(
    office, meet, fake_api: FakeAnthropic
) -> None:
    o = await office(rooms=[{"engage": "mention", "ignored": "accumulate"}])
    alice, mallory, bot, team = o.alice, o.mallory, o.bot, o.team
    oscar = await second_stranger(o, meet)

    await mallory.say(team, "MALLORY-PRIVATE the door code is 4711")
    await oscar.say(team, "OSCAR-PRIVATE thanks, see you at five")
    await alice.say(team, "the build broke at noon")  # allowed: kept as context
    await mallory.say(team, "MALLORY-ASK could you run the tests?", mention=bot)
    await alice.say(team, "ALICE-ASK what do you make of it?", mention=bot)
    await alice.wait_for(team, bot_text(bot, r"Echo: .*ALICE-ASK"))

    # Intake is in order: the stranger's mention, before the owner's answered one, is carded.
    cards = await cards_in(o)
    assert len(cards) == 1, cards
    assert "MALLORY-ASK" in cards[0]
    assert "PRIVATE" not in cards[0], "un-addressed chatter was quoted to the owner"
    assert team in cards[0], "the card names the room by its id, not only its title"

    prompt = " ".join(fake_api.user_texts(fake_api.requests[-1]))
    assert "the build broke at noon" in prompt, "an allowed member's words are context"
    assert "PRIVATE" not in prompt, "a stranger's un-approved words reached the agent"
    assert "MALLORY-ASK" not in prompt, "a held message is nobody's context"
    assert len(fake_api.requests) == 2, "only the owner's message ran"


async def test_a_flood_of_mentions_is_one_card_and_allow_runs_only_what_it_showed(
    office, fake_api: FakeAnthropic
) -> None:
    o = await office()
    alice, mallory, bot, desk, team = o.alice, o.mallory, o.bot, o.desk, o.team

    for n in range(1, 11):
        await mallory.say(team, f"FLOOD-{n:02d} please", mention=bot)
    card = await card_ready(alice, desk, bot, CARD)
    summary = await alice.wait_for(
        desk,
        bot_edit(bot, card["event_id"], r"wrote 10 messages.*and 7 more messages not shown"),
    )
    text = str(summary["content"]["m.new_content"]["body"])
    assert [f"FLOOD-{n:02d}" in text for n in range(1, 11)] == [True] * 3 + [False] * 7, text
    assert team in text, "the card names the room by its id"
    await alice.send(desk, "m.reaction", reaction(card["event_id"], "✅"))

    decided = await alice.wait_for(desk, bot_edit(bot, card["event_id"], r"Allowed by"))
    assert "Ran 3 messages; dropped 7 not shown" in str(decided["content"]["body"])
    for n in range(1, 4):
        await mallory.wait_for(team, bot_text(bot, rf"Echo: FLOOD-{n:02d} please"))
    # The owner's message queues behind the released ones in the room's conversation.
    await alice.say(team, "OWNER-CHECK", mention=bot)
    await alice.wait_for(team, bot_text(bot, r"Echo: OWNER-CHECK"))

    ran = re.findall(
        r"Echo: (FLOOD-\d+)",
        " ".join(
            str(e["content"].get("body", ""))
            for e in await alice.history(team)
            if e.get("sender") == bot
        ),
    )
    assert sorted(ran) == [f"FLOOD-{n:02d}" for n in range(1, 4)], (
        "messages the owner never saw ran"
    )
    assert len(await cards_in(o)) == 1, "a flood is one card, edited"


async def test_a_strangers_command_does_nothing_and_makes_no_card(
    office, fake_api: FakeAnthropic
) -> None:
    o = await office()
    alice, mallory, bot, team = o.alice, o.mallory, o.bot, o.team

    fake_api.hold("SLOW-JOB")
    await alice.say(team, "SLOW-JOB please", mention=bot)
    assert await asyncio.to_thread(fake_api.wait_for_held, 60), "the agent never asked"
    await mallory.say(team, "!stop")
    await mallory.say(team, "!new")
    await alice.say(team, "!status")
    await alice.wait_for(team, bot_text(bot, r"Running task \w+ for \d+ s: SLOW-JOB please"))
    fake_api.release()
    await alice.wait_for(team, bot_text(bot, r"Echo: SLOW-JOB please"))

    bodies = [str(e["content"].get("body", "")) for e in await alice.history(team)]
    assert not any("Stopp" in b or "Started a new conversation" in b for b in bodies), bodies
    assert await cards_in(o) == [], "a stranger's command was carded"


async def test_revoke_takes_an_approval_back_and_only_an_owner_may(
    office, fake_api: FakeAnthropic
) -> None:
    o = await office()
    alice, mallory, eve, bot, desk, team = o.alice, o.mallory, o.eve, o.bot, o.desk, o.team

    await mallory.say(team, "FIRST please", mention=bot)
    card = await card_ready(alice, desk, bot, CARD)
    await alice.send(desk, "m.reaction", reaction(card["event_id"], "✅"))
    await mallory.wait_for(team, bot_text(bot, r"Echo: FIRST please"))

    await alice.client.room_invite(team, eve.user_id)
    await eve.join(team)
    await eve.say(team, f"!revoke {mallory.user_id} everywhere")  # allowed, not an owner
    await eve.wait_for(team, bot_text(bot, r"Only an owner of this bot can revoke"))
    await mallory.say(team, "SECOND please", mention=bot)
    await mallory.wait_for(team, bot_text(bot, r"Echo: SECOND please"))

    await alice.say(team, f"!revoke {mallory.user_id}")
    answer = await alice.wait_for(team, bot_text(bot, r"Revoked"))
    assert f"Revoked {mallory.user_id}'s approval in Team ({team})" in str(
        answer["content"]["body"]
    )
    await mallory.say(team, "THIRD please", mention=bot)
    again = await alice.wait_for(desk, bot_text(bot, r"Unknown sender in Team.*THIRD please"))
    assert again["event_id"] != card["event_id"]
    await alice.say(team, "OWNER-CHECK", mention=bot)
    await alice.wait_for(team, bot_text(bot, r"Echo: OWNER-CHECK"))
    assert not any(bot_text(bot, r"Echo: THIRD")(e) for e in await alice.history(team))
    assert len(await cards_in(o)) == 2
