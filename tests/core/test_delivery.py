"""Sends that fail: a reply that cannot be delivered parks its task (the conversation goes
on, the stored reply goes out when the channel recovers or at the next start, never
recomputed); an acknowledgement never decides whether a task runs; and one room's failing
sends never hold up another room."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from tests.core.conftest import PATIENT, World


class RateLimited(Exception):
    """What slack_sdk raises for an HTTP 429: an error whose response says so."""

    def __init__(self) -> None:
        super().__init__("ratelimited")
        self.response = type("Response", (), {"status_code": 429})()


async def test_an_undeliverable_reply_does_not_block_the_conversation(world: World) -> None:
    fault = world.channel.fail("reply", room="dm")
    first = await world.say("first")
    parked = await world.settled(first)
    assert parked.state is TaskState.UNDELIVERED
    assert parked.reply is not None
    assert parked.reply.text == "Echo: first", "the stored reply is kept"
    assert parked.delivery_error is not None
    assert "homeserver is down" in parked.delivery_error
    assert fault.hits >= 3, "the retry policy's attempts"

    world.channel.mend()
    second = await world.say("second")
    assert (await world.reply(second)).text == "Echo: second"
    assert world.channel.texts("dm", "ack")[-1] == "Working on it…", "not queued behind it"


async def test_a_parked_reply_goes_out_when_the_channel_recovers(world: World) -> None:
    world.channel.fail("reply", room="dm")
    message = await world.say("answer me")
    assert (await world.settled(message)).state is TaskState.UNDELIVERED
    world.channel.mend()
    assert (await world.reply(message)).text == "Echo: answer me"
    done = await world.completed(message)
    assert done.completion_reason is CompletionReason.SUCCESS
    assert done.reply_delivered
    assert done.delivery_error is None
    assert world.agent.bodies() == ["answer me"], "re-sent, never recomputed"
    await world.idle()
    assert world.replies() == ["Echo: answer me"]


async def test_a_parked_reply_goes_out_at_the_next_start(make_world: Callable[..., World]) -> None:
    world = make_world()
    await world.start()
    assert world.service is not None
    world.channel.fail("reply", room="dm")
    message = await world.say("before the restart")
    assert (await world.settled(message)).state is TaskState.UNDELIVERED
    await world.stop()
    world.channel.mend()
    await world.restart()
    assert (await world.reply(message)).text == "Echo: before the restart"
    assert world.agent.bodies() == ["before the restart"]


async def test_a_failing_acknowledgement_does_not_strand_the_task(world: World) -> None:
    world.channel.fail("ack", room="dm", error=RateLimited)
    message = await world.say("run anyway")
    assert (await world.reply(message)).text == "Echo: run anyway"
    assert world.channel.texts("dm", "ack") == []


async def test_an_acknowledgement_is_retried(world: World) -> None:
    world.channel.fail("ack", room="dm", times=1, error=RateLimited)
    message = await world.say("please ack")
    await world.reply(message)
    assert world.channel.texts("dm", "ack") == ["Working on it…"]


async def test_a_command_answer_that_fails_is_parked_not_lost(world: World) -> None:
    world.channel.fail("reply", room="dm")
    command = await world.say("/help")
    parked = await world.settled(command)
    assert parked.state is TaskState.UNDELIVERED
    world.channel.mend()
    assert (await world.reply(command)).text.startswith(
        "Commands (`!` works instead of `/`):\n- `/stop`:"
    )
    assert (await world.completed(command)).completion_reason is CompletionReason.SUCCESS


async def test_a_room_whose_sends_keep_failing_does_not_delay_another(
    make_world: Callable[..., World],
) -> None:
    world = make_world(policy=PATIENT)
    await world.start()
    fault = world.channel.fail("reply", room="a")
    a = await world.say("in a", room="a")
    await world.until(lambda: fault.hits >= 1, "room a's reply failing")
    b = await world.say("in b", room="b")
    assert (await world.reply(b)).text == "Echo: in b"
    assert world.channel.texts("b", "ack") == ["Working on it…"]
    assert (await world.task(a)).state is TaskState.EXECUTING, "a is still being retried"


async def test_a_hanging_acknowledgement_does_not_delay_another_room(world: World) -> None:
    hang = world.channel.hang("ack", room="a")
    a = await world.say("in a", room="a")
    await world.until(lambda: hang.hits >= 1, "room a's ack hanging")
    b = await world.say("in b", room="b")
    assert (await world.reply(b)).text == "Echo: in b"
    hang.release()
    await world.reply(a)


async def test_a_failing_refusal_does_not_delay_another_room(
    make_world: Callable[..., World],
) -> None:
    world = make_world(policy=PATIENT, max_pending=0)
    await world.start()
    await world.say("busy hold:a", room="a")
    await world.until(lambda: world.agent.running, "a running")
    fault = world.channel.fail("rejection", room="a")
    await world.say("one too many", room="a")
    await world.until(lambda: fault.hits >= 1, "the refusal failing")
    b = await world.say("in b", room="b")
    assert (await world.reply(b)).text == "Echo: in b"
    world.agent.release("a")


async def test_a_command_answer_being_retried_does_not_delay_another_room(
    make_world: Callable[..., World],
) -> None:
    world = make_world(policy=PATIENT)
    await world.start()
    fault = world.channel.fail("reply", room="a")
    await world.say("/help", room="a")
    await world.until(lambda: fault.hits >= 1, "room a's answer failing")
    b = await world.say("in b", room="b")
    assert (await world.reply(b)).text == "Echo: in b"


async def test_a_task_runs_beside_its_acknowledgement_and_shows_nothing_before_it(
    world: World,
) -> None:
    """The run starts while the acknowledgement is on its way (a Matrix send, 15-20 ms
    before every turn, issue 33); its progress and its reply wait for it, so the person
    never sees them ahead of "Working on it…"."""
    hang = world.channel.hang("ack", room="dm")
    message = await world.say("step hello")
    await world.until(lambda: world.agent.prompts, "the agent running, the ack still out")
    await asyncio.sleep(0.2)  # room for a reply that would not wait
    assert not world.channel.seen("dm"), "shown before the acknowledgement"
    hang.release()
    assert (await world.reply(message)).text == "Echo: step hello"
    kinds = [sent.kind for sent in world.channel.seen("dm")]
    assert kinds[0] == "ack", kinds
