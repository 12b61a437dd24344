"""/diff is answered after the channel's intake lock is released (it can take its whole
120 s), but still by the task's intake job: a store blip while answering it is retried as
any routing step is, and while it runs the task counts as being taken in, so a channel
taken in again meanwhile (a replica regaining its lease) does not run it a second time."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from gateway_bot.domain.records import TaskRecord
from gateway_bot.state.sql_store import SqlStore
from tests.core.conftest import World

NO_DIFF = "/diff is not available here."
"""The core world has no workspaces: what its /diff answers, through the same path."""


class StartOfAnswer:
    """The store's move of a task to EXECUTING (where an answer starts) meets a fault once:
    ``error`` is raised there, or, without one, the move waits until ``let_go`` is set."""

    def __init__(self, store: SqlStore, error: Exception | None = None) -> None:
        self.hits = 0
        self.waiting = asyncio.Event()
        self.let_go = asyncio.Event()
        self._error = error
        self._transition = store.transition
        store.transition = self._faulty  # type: ignore[method-assign]

    async def _faulty(self, task_id: str, target: TaskState, **more: Any) -> TaskRecord:
        if target is TaskState.EXECUTING and self.hits == 0:
            self.hits += 1
            if self._error is not None:
                raise self._error
            self.waiting.set()
            await self.let_go.wait()
        return await self._transition(task_id, target, **more)


async def test_a_diff_whose_answer_meets_a_store_blip_is_still_answered_once(
    world: World,
) -> None:
    blip = StartOfAnswer(world.store, ConnectionError("the database connection dropped"))
    message = await world.say("/diff")
    task = await world.completed(message)
    await world.idle()
    assert blip.hits == 1, "the store blip was met"
    assert task.completion_reason is CompletionReason.SUCCESS
    assert world.replies() == [NO_DIFF]


async def test_a_channel_taken_in_again_while_its_diff_runs_does_not_run_it_twice(
    world: World,
) -> None:
    slow = StartOfAnswer(world.store)
    message = await world.say("/diff")
    await asyncio.wait_for(slow.waiting.wait(), 10)  # the /diff is being answered
    assert world.service is not None
    await world.service.take_in_channel(world.channel.name)
    slow.let_go.set()
    await world.completed(message)
    await world.idle()
    assert world.replies() == [NO_DIFF]
    assert world.channel.parsed.count(message) == 1, "the /diff was routed once"
