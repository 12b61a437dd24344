"""Intake and routing: what is parsed, retried, refused, answered at once or queued."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gateway_bot.config.access import AccessSettings
from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from tests.core.conftest import PATIENT, World, owners_access


async def test_a_parse_error_rejects_the_message_at_once(world: World) -> None:
    garbled = await world.hear({"kind": "garbled", "files": ["not an object"]}, "alice")
    task = await world.settled(garbled)
    assert task.state is TaskState.COMPLETED
    assert task.completion_reason is CompletionReason.REJECTED
    assert task.error is not None
    assert "AttributeError" in task.error
    assert world.channel.parsed.count(garbled) == 1, "a parse error is not retried"

    after = await world.say("next one")
    assert (await world.reply(after)).text == "Echo: next one"


async def test_a_parse_error_is_not_retried_at_the_next_start(world: World) -> None:
    garbled = await world.hear({"kind": "garbled", "files": [1]}, "alice")
    await world.settled(garbled)
    await world.restart()
    await world.idle()
    assert world.channel.parsed.count(garbled) == 1


async def test_a_transient_parse_failure_is_retried(world: World) -> None:
    world.channel.fail("parse", room="dm", times=2)
    message = await world.say("after a blip")
    assert (await world.reply(message)).text == "Echo: after a blip"
    assert world.channel.parsed.count(message) == 3


async def test_a_parse_failure_in_one_room_does_not_hold_up_another(
    make_world: Callable[..., World],
) -> None:
    world = make_world(policy=PATIENT)
    await world.start()
    fault = world.channel.fail("parse", room="a")
    a = await world.say("in a", room="a")
    await world.until(lambda: fault.hits >= 1, "room a failing to parse")
    b = await world.say("in b", room="b")
    assert (await world.reply(b)).text == "Echo: in b"
    assert (await world.task(a)).state in (TaskState.QUEUED, TaskState.AUTHENTICATING)
    assert world.channel.parsed.count(a) == 1, "room a waits out its backoff, not intake"


async def test_a_parse_that_keeps_failing_is_taken_up_again_later(world: World) -> None:
    world.channel.fail("parse", room="dm", times=4)
    message = await world.say("eventually")
    assert (await world.reply(message)).text == "Echo: eventually"


async def test_a_refused_sender_is_recorded_not_answered(world: World) -> None:
    refused = await world.hear({"kind": "refuse", "room": "dm"}, "mallory")
    task = await world.settled(refused)
    assert task.completion_reason is CompletionReason.AUTH_FAILED
    assert world.channel.sent == []


@pytest.mark.parametrize(
    "invisible",
    ["\u200b", " \u200b ", "\u2060\ufeff", "\u200e\u200f", "\u00ad", "\u200d \n"],
)
async def test_a_prompt_of_invisible_characters_is_empty(world: World, invisible: str) -> None:
    message = await world.say(f"@bot {invisible}", room="group", direct=False)
    assert (await world.reply(message)).text == "Your message was empty: nothing to do."
    assert world.agent.runs == []


async def test_a_prompt_with_a_zero_width_joiner_inside_text_runs(world: World) -> None:
    message = await world.say("@bot hi\u200dthere", room="group", direct=False)
    assert (await world.reply(message)).text == "Echo: hi\u200dthere"


async def test_an_unknown_command_is_answered_not_run(world: World) -> None:
    message = await world.say("/frobnicate now")
    assert (await world.reply(message)).text.startswith("Unknown command 'frobnicate'")
    assert (await world.settled(message)).completion_reason is CompletionReason.REJECTED
    assert world.agent.runs == []


async def test_a_group_message_without_a_mention_is_not_for_the_bot(world: World) -> None:
    message = await world.say("talking among ourselves", room="group", direct=False)
    task = await world.settled(message)
    assert task.completion_reason is CompletionReason.REJECTED
    assert task.error == "not addressed to the bot"
    assert world.channel.sent == []


async def test_accumulated_context_goes_with_the_next_mention(
    make_world: Callable[..., World],
) -> None:
    access = owners_access(rooms=[{"match": "group", "ignored": "accumulate"}])
    world = make_world(access=access)
    await world.start()
    await world.settled(await world.say("the build is red", room="group", direct=False))
    message = await world.say("@bot why?", room="group", direct=False, sender="bob")
    assert (await world.reply(message)).text == "Echo: why? [context: Alice: the build is red]"


async def test_a_message_while_not_accepting_is_stored_and_run_at_the_next_start(
    make_world: Callable[..., World],
) -> None:
    world = make_world(access=AccessSettings())
    await world.start()
    assert world.service is not None
    submit = world.channel.listener.submit
    await world.service.stop_listening()
    world.channel.listener.submit = submit
    message = await world.say("late")
    assert (await world.task(message)).state is TaskState.QUEUED
    await world.restart()
    assert (await world.reply(message)).text == "Echo: late"
