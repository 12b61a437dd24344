"""Approval cards as the core drives them: a stranger's message is held and carded, a card
whose post failed is posted again (now, and at the next start), and a decision counts once."""

from __future__ import annotations

import re

from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from tests.core.conftest import World


def card_code(world: World) -> str:
    cards = world.channel.texts("owners", "card")
    assert len(cards) == 1, cards
    found = re.search(r"approve ([0-9a-f]{12})", cards[0])
    assert found, cards[0]
    return found.group(1)


async def held_card(world: World, text: str = "hello bot") -> tuple[str, str]:
    """A stranger writes; returns (their message id, the card's code)."""
    message = await world.say(text, sender="stranger")
    await world.until(lambda: world.channel.texts("owners", "card"), "the approval card")
    return message, card_code(world)


async def test_a_strangers_message_is_held_and_runs_once_allowed(world: World) -> None:
    message, code = await held_card(world)
    assert (await world.task(message)).state is TaskState.AUTHENTICATING
    assert world.agent.runs == []
    await world.click(code, "allow")
    assert (await world.reply(message)).text == "Echo: hello bot"


async def test_denied_messages_are_dropped(world: World) -> None:
    message, code = await held_card(world)
    click = await world.click(code, "deny")
    await world.settled(click)
    task = await world.settled(message)
    assert task.completion_reason is CompletionReason.UNAUTHORIZED
    assert world.agent.runs == []


async def test_a_card_decided_twice_counts_once(world: World) -> None:
    message, code = await held_card(world)
    first = await world.click(code, "allow")
    second = await world.click(code, "deny")
    assert (await world.settled(first)).completion_reason is CompletionReason.SUCCESS
    assert (await world.settled(second)).completion_reason is CompletionReason.SUCCESS
    assert (await world.reply(message)).text == "Echo: hello bot"
    await world.idle()
    assert world.agent.bodies() == ["hello bot"], "the second decision changed nothing"
    updates = world.channel.texts("owners", "card_update")
    assert len(updates) == 1, "one decided card"
    third = await world.say(f"!deny {code}", room="owners", sender="owner")
    assert (await world.reply(third)).text == f"Approval {code} was already allowed."


async def test_a_decision_by_someone_else_is_ignored(world: World) -> None:
    message, code = await held_card(world)
    click = await world.click(code, "allow", sender="bob")
    assert (await world.settled(click)).completion_reason is CompletionReason.UNAUTHORIZED
    assert (await world.task(message)).state is TaskState.AUTHENTICATING


async def test_a_card_whose_post_failed_is_posted_again(world: World) -> None:
    fault = world.channel.fail("card", room="owners", times=1)
    message, code = await held_card(world)
    assert fault.hits == 1
    await world.click(code, "allow")
    assert (await world.reply(message)).text == "Echo: hello bot"


async def test_a_card_never_posted_is_sent_at_the_next_start(world: World) -> None:
    world.channel.fail("card", room="owners")
    message = await world.say("are you there", sender="stranger")
    await world.until(lambda: world.channel.calls["card", "owners"] >= 3, "the attempts")
    await world.stop()
    world.channel.mend()
    await world.restart()
    await world.until(lambda: world.channel.texts("owners", "card"), "the card, at last")
    code = card_code(world)
    assert "are you there" in world.channel.texts("owners", "card")[0]
    await world.click(code, "allow")
    assert (await world.reply(message)).text == "Echo: are you there"
    assert len(world.channel.texts("owners", "card")) == 1, "one card, not one per start"


async def test_an_owner_is_never_held(world: World) -> None:
    message = await world.say("from the owner", sender="owner")
    assert (await world.reply(message)).text == "Echo: from the owner"
    assert world.channel.texts("owners", "card") == []


async def test_a_strangers_command_is_dropped_unanswered(world: World) -> None:
    message = await world.say("/stop", sender="stranger")
    task = await world.settled(message)
    assert task.completion_reason is CompletionReason.UNAUTHORIZED
    assert world.channel.sent == []
