"""The per-conversation scheduler: one task at a time in a conversation and in arrival
order, conversations in parallel up to the global limit, a bounded queue, /stop, /status,
and a shutdown that leaves a running task for the next start."""

from __future__ import annotations

from collections.abc import Callable

from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from tests.core.conftest import World


async def test_a_message_is_acknowledged_run_and_answered(world: World) -> None:
    message = await world.say("hello there")
    assert (await world.reply(message)).text == "Echo: hello there"
    assert world.channel.texts("dm", "ack") == ["Working on it…"]
    task = await world.settled(message)
    assert task.state is TaskState.COMPLETED
    assert task.completion_reason is CompletionReason.SUCCESS
    assert task.reply_delivered


async def test_a_conversation_runs_its_messages_one_at_a_time_in_order(world: World) -> None:
    first = await world.say("one hold:first")
    await world.until(lambda: world.agent.running, "the first task running")
    second = await world.say("two")
    third = await world.say("three")
    await world.until(lambda: len(world.channel.texts("dm", "ack")) == 3, "three acks")
    assert world.channel.texts("dm", "ack") == [
        "Working on it…",
        "Queued behind 1 task(s).",
        "Queued behind 2 task(s).",
    ]
    assert world.agent.bodies() == ["one hold:first"], "the others wait for the first"
    world.agent.release("first")
    for message in (first, second, third):
        await world.reply(message)
    assert world.agent.bodies() == ["one hold:first", "two", "three"]
    assert world.replies() == ["Echo: one hold:first", "Echo: two", "Echo: three"]
    assert world.agent.peak == 1


async def test_a_message_after_the_reply_is_not_queued_behind_its_last_progress_edit(
    world: World,
) -> None:
    """The sender read the reply and wrote again while the first task's last progress edit
    ("Done · ...") was still on its way: the new message waits for nothing."""
    world.channel.hang("done", room="dm")
    first = await world.say("one")
    assert (await world.reply(first)).text == "Echo: one"
    second = await world.say("two")
    await world.until(lambda: len(world.channel.texts("dm", "ack")) == 2, "two acks")
    assert world.channel.texts("dm", "ack") == ["Working on it…", "Working on it…"]
    world.channel.mend()
    assert (await world.reply(second)).text == "Echo: two"


async def test_conversations_run_in_parallel(world: World) -> None:
    a = await world.say("in a hold:a", room="a")
    b = await world.say("in b hold:b", room="b")
    # Both are running at once: neither waits for the other to finish.
    await world.until(lambda: len(world.agent.running) == 2, "both tasks running together")
    world.agent.release("b")
    assert (await world.reply(b)).text == "Echo: in b hold:b"
    assert world.replies("a") == [], "a is still running"
    world.agent.release("a")
    await world.reply(a)


async def test_threads_of_one_room_are_separate_conversations(world: World) -> None:
    await world.say("thread one hold:t1", room="r", thread="t1")
    two = await world.say("thread two", room="r", thread="t2")
    assert (await world.reply(two)).text == "Echo: thread two"
    world.agent.release("t1")


async def test_the_global_limit_caps_running_tasks(make_world: Callable[..., World]) -> None:
    world = make_world(max_concurrent=1)
    await world.start()
    messages = [await world.say(f"job hold:{room}", room=room) for room in ("a", "b", "c")]
    await world.until(
        lambda: sum(len(world.channel.texts(r, "ack")) for r in "abc") == 3, "three acks"
    )
    await world.until(lambda: world.agent.running, "one task running")
    for room in "abc":
        world.agent.release(room)
    for message in messages:
        await world.reply(message)
    assert world.agent.peak == 1, "never more than max_concurrent_tasks at once"


async def test_a_full_queue_refuses_the_next_message(make_world: Callable[..., World]) -> None:
    world = make_world(max_pending=1)
    await world.start()
    running = await world.say("first hold:q")
    await world.until(lambda: world.agent.running, "the first task running")
    waiting = await world.say("second")
    overflow = await world.say("third")
    task = await world.settled(overflow)
    assert task.completion_reason is CompletionReason.REJECTED
    await world.until(lambda: world.channel.texts("dm", "rejection"), "the refusal")
    assert "already has 1 messages waiting" in world.channel.texts("dm", "rejection")[0]
    world.agent.release("q")
    await world.reply(running)
    await world.reply(waiting)
    assert "third" not in world.agent.bodies()


async def test_stop_cancels_the_running_task_and_the_queue_goes_on(world: World) -> None:
    slow = await world.say("slow hold:never")
    await world.until(lambda: world.agent.running, "the slow task running")
    queued = await world.say("next")
    stop = await world.say("/stop")
    assert (await world.reply(stop)).text.startswith("Stopping task ")
    assert (await world.reply(slow)).text == "Stopped. The task was cancelled with /stop."
    assert (await world.reply(queued)).text == "Echo: next"
    stopped = await world.settled(slow)
    assert stopped.completion_reason is CompletionReason.CANCELLED
    assert world.agent.cancelled == [stopped.id]


async def test_stop_drops_a_task_waiting_for_its_unreachable_host(world: World) -> None:
    """A conversation whose Podman host is down keeps its message and retries; its sender
    sees why in /status and can give up with /stop instead of waiting for a host that may
    never come back (decision 0088)."""
    world.agent.host_down = "beta"
    waiting = await world.say("build it")
    await world.until(
        lambda: any("host beta is unreachable" in t for t in world.channel.texts("dm")),
        "the notice that the message waits for its host",
    )

    async def status() -> str | None:
        text = (await world.reply(await world.say("/status"))).text
        return text if "Waiting for the agent's host beta (unreachable)" in text else None

    shown = None
    for _ in range(20):  # the pause before the next try is what /status shows
        if shown := await status():
            break
    assert shown is not None, "/status never said the task waits for its host"
    stop = await world.say("/stop")
    assert (await world.reply(stop)).text.startswith("Stopping task ")
    assert (await world.reply(waiting)).text == "Stopped. The task was cancelled with /stop."
    assert (await world.settled(waiting)).completion_reason is CompletionReason.CANCELLED

    world.agent.host_down = None  # the host is back: the next message runs, the old one never
    assert (await world.reply(await world.say("next"))).text == "Echo: next"
    assert world.agent.bodies() == ["next"]


async def test_stop_with_nothing_running(world: World) -> None:
    stop = await world.say("!stop")
    assert (await world.reply(stop)).text == "Nothing is running in this conversation."


async def test_stop_reaches_only_its_own_conversation(world: World) -> None:
    a = await world.say("a hold:a", room="a")
    b = await world.say("b hold:b", room="b")
    await world.until(lambda: len(world.agent.running) == 2, "both running")
    await world.reply(await world.say("/stop", room="a"))
    assert (await world.reply(a)).text.startswith("Stopped.")
    world.agent.release("b")
    assert (await world.reply(b)).text == "Echo: b hold:b"


async def test_status_shows_the_running_task_and_the_queue(world: World) -> None:
    await world.say("long job hold:s step")
    await world.until(lambda: world.agent.running, "the job running")
    await world.say("afterwards")
    status = await world.reply(await world.say("/status"))
    lines = status.text.splitlines()
    assert lines[1].startswith("Running task ")
    assert lines[1].endswith(": long job hold:s step")
    assert lines[-2:] == ["1 waiting:", "  1. afterwards"]
    world.agent.release("s")


async def test_progress_steps_reach_the_room(world: World) -> None:
    message = await world.say("do step")
    await world.reply(message)
    assert world.channel.texts("dm", "progress") == ["ran a step"]


async def test_a_crashing_agent_gets_an_error_reply_and_the_queue_goes_on(world: World) -> None:
    broken = await world.say("crash")
    after = await world.say("after")
    assert (await world.reply(broken)).text == "Internal error: the agent fell over"
    assert (await world.reply(after)).text == "Echo: after"
    assert (await world.settled(broken)).completion_reason is CompletionReason.INTERNAL_ERROR


async def test_shutdown_mid_task_leaves_it_for_the_next_start(world: World) -> None:
    message = await world.say("interrupted hold:forever")
    await world.until(lambda: world.agent.running, "the task running")
    await world.stop(timeout_s=0.0)
    task = await world.task(message)
    assert task.state is TaskState.EXECUTING, "abandoned where it stood"
    assert world.replies() == []

    world.agent.release("forever")
    await world.restart()
    assert (await world.reply(message)).text == "Echo: interrupted hold:forever"
    await world.idle()
    assert world.replies() == ["Echo: interrupted hold:forever"], "answered once"
    assert world.agent.bodies().count("interrupted hold:forever") == 2, "re-run, not lost"


async def test_shutdown_waits_for_a_task_that_finishes_in_time(world: World) -> None:
    message = await world.say("quick")
    assert world.service is not None
    await world.service.shutdown(5.0)
    world.service = None
    assert (await world.task(message)).state is TaskState.COMPLETED
    assert world.replies() == ["Echo: quick"]


async def test_waiting_tasks_survive_a_restart_in_order(world: World) -> None:
    first = await world.say("first hold:gone")
    await world.until(lambda: world.agent.running, "the first running")
    second = await world.say("second")
    third = await world.say("third")
    await world.until(lambda: len(world.channel.texts("dm", "ack")) == 3, "three acks")
    await world.stop()
    world.agent.release("gone")
    await world.restart()
    for message in (first, second, third):
        await world.reply(message)
    assert world.agent.bodies()[-3:] == ["first hold:gone", "second", "third"]


async def test_a_redelivered_message_runs_once(world: World) -> None:
    from gateway_bot.domain.messages import RawMessage

    submit = world.channel.listener.submit
    assert submit is not None
    raw = RawMessage("fake", "same-id", "alice", {"text": "once", "room": "dm"}, 0.0)
    assert await submit(raw)
    assert await submit(raw)
    await world.idle()
    assert world.agent.bodies() == ["once"]
    assert world.replies() == ["Echo: once"]
