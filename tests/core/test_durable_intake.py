"""A message is taken in (parsed, routed) while its flush runs (issue 19: group commit),
but it joins its conversation's lane only once it is on disk, and nobody hears of it
before: not the source (``submit`` returns, the channel then acks or deletes it there) and
not the person (the acknowledgement)."""

from __future__ import annotations

import asyncio

from gateway_bot.domain.lifecycle import TaskState
from gateway_bot.domain.records import TaskRecord
from gateway_bot.state.group_flush import GroupFlush
from tests.core.conftest import World


async def test_a_message_is_parsed_during_its_flush_and_queued_and_acknowledged_after_it(
    world: World,
) -> None:
    backend = world.store.database.backend
    disk = backend.flusher
    let_go = asyncio.Event()

    async def held_flush() -> None:
        """The real fsync, held back until the test lets it run."""
        await let_go.wait()
        disk.committed()
        await disk.wait()

    backend.flusher = GroupFlush(held_flush)
    states: list[TaskState] = []

    def seen(task: TaskRecord, previous: TaskState | None) -> None:
        states.append(task.state)

    world.store.on_transition(seen)
    submitted = asyncio.create_task(world.say("hello"))
    try:
        await world.until(lambda: world.channel.parsed, "the message parsed during its flush")
        await asyncio.sleep(0.2)  # room for a task that did not wait to reach its lane
        assert not submitted.done(), "the source was told before the message was on disk"
        assert TaskState.PENDING not in states, "queued before it was on disk"
        assert not world.channel.seen("dm", "ack"), "acknowledged before it was on disk"
    finally:
        let_go.set()  # (a failure must not leave the store's close waiting on the flush)
    message_id = await asyncio.wait_for(submitted, 30)
    await world.until(lambda: world.channel.seen("dm", "ack"), "the acknowledgement")
    assert (await world.reply(message_id)).text == "Echo: hello"
