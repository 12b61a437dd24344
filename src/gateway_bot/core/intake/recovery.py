"""Recovery: finishing what a crash, or a replica that lost its claim, left behind, so
each accepted message is answered exactly once.

Every step is decided by the task's stored state alone: a message not yet routed is taken
in again, a run whose reply is stored is delivered (never run again), an interrupted run
goes back to pending and runs again; at start, parked replies are sent again.

Split from ``core/service.py``, which decides when recovery runs (at start for a single
daemon, per claimed conversation for a replica of several: ``core/replicas/duties.py``).
"""

from __future__ import annotations

import dataclasses
import logging

from gateway_bot.core.conversations.delivery import ReplyDelivery
from gateway_bot.core.conversations.queue import Scheduler
from gateway_bot.core.intake.intake import Intake
from gateway_bot.core.jobs import Jobs
from gateway_bot.domain.lifecycle import TaskState
from gateway_bot.state.store import Store

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Recovery:
    """What recovery needs of the service's parts (all shared with it, none owned here)."""

    _store: Store
    _intake: Intake
    _scheduler: Scheduler
    _replies: ReplyDelivery
    _jobs: Jobs

    async def at_start(self) -> None:
        """The start-up sweep: every task not completed is finished or re-run."""
        for task in await self._store.tasks_in_states(
            [TaskState.QUEUED, TaskState.AUTHENTICATING, TaskState.EXECUTING, TaskState.PENDING]
        ):
            if task.state is TaskState.AUTHENTICATING:
                task = await self._store.transition(task.id, TaskState.QUEUED)
            if task.state is TaskState.QUEUED:
                self._intake.take_in(task.id)
                continue
            if task.state is TaskState.EXECUTING:
                if task.reply is not None:
                    log.info("recovery: delivering the stored reply of task %s", task.id)
                    self._jobs.spawn(self._replies.finish(task), name=f"finish-{task.id}")
                    continue
                log.info("recovery: task %s was interrupted mid-run; running it again", task.id)
                task = await self._store.transition(task.id, TaskState.PENDING)
            assert task.conversation_id is not None
            self._scheduler.enqueue(task.conversation_id, task.id)
        await self._replies.redeliver()

    async def conversation(self, conversation_id: str) -> None:
        """A replica that just claimed a conversation finishes what the previous holder
        left, oldest first: a stored reply is delivered, an interrupted run goes back to
        pending. The caller then queues the pending tasks (``core/replicas/duties.py``)."""
        for task in await self._store.conversation_tasks(
            conversation_id, [TaskState.EXECUTING, TaskState.PENDING]
        ):
            if task.state is TaskState.EXECUTING:
                if task.reply is not None:
                    log.info("take-over: delivering the stored reply of task %s", task.id)
                    await self._replies.finish(task)
                    continue
                log.info("take-over: task %s was interrupted mid-run; running it again", task.id)
                await self._store.transition(task.id, TaskState.PENDING)
