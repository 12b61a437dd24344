"""Intake: a message committed to the store, then taken in (authenticated and routed) in
the order it arrived on its channel.

Intake is serialised per channel so that messages reach their conversation in arrival
order, but nothing slow happens under that lock: channel calls that fail for a transport
reason are retried with the lock released between attempts, and every send
(acknowledgements, command answers, refusals) is a job of its own. A message whose channel
stays unreachable goes back to QUEUED, and the service's periodic sweep takes it in again.

Split from ``core/service.py``, which keeps the lifecycle around it (start, the sweeps,
recovery, shutdown, the replicas' hooks): this module holds the path from a channel's
``submit`` to ``core/intake/routing.py``, and which tasks are being taken in now.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping

from gateway_bot.core.channel import ChannelAdapter
from gateway_bot.core.conversations.queue import Scheduler
from gateway_bot.core.fault_points import reached
from gateway_bot.core.jobs import Jobs
from gateway_bot.core.retries import RetryPolicy, call_channel, is_transient
from gateway_bot.domain.lifecycle import TaskState
from gateway_bot.domain.messages import RawMessage
from gateway_bot.domain.records import TaskRecord
from gateway_bot.state.store import Store

log = logging.getLogger(__name__)

AfterLock = Callable[[], Awaitable[None]]
"""Work routing leaves for after the channel's lock (answering /diff, which reads the
agent's workspace and can take its whole 120 s): run by the same intake job, under the same
retries, with the lock released."""

Route = Callable[[str, TaskRecord | None], Awaitable[AfterLock | None]]
"""Routes one stored task by its id (``Router.route``), from its record when the caller has
it as it reads now (else it is read); called under the channel's lock."""


@dataclasses.dataclass
class Intake:
    """What intake needs of the service's parts (shared with it), and its own state."""

    _store: Store
    _adapters: Mapping[str, ChannelAdapter]
    _scheduler: Scheduler
    _jobs: Jobs
    _policy: RetryPolicy
    _route: Route
    accepting: bool = dataclasses.field(default=False, init=False)
    """Set by the service while it listens: a new message is taken in at once. Off, it
    is only stored (the next start's recovery, or a sweep, takes it in)."""
    _locks: dict[str, asyncio.Lock] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(asyncio.Lock), init=False
    )
    """One per channel: its messages are routed one at a time, in arrival order."""
    _taking_in: set[str] = dataclasses.field(default_factory=set, init=False)
    """Tasks with an intake job now (waiting for the lock, parsing, backing off, or doing
    what routing left for after the lock)."""

    async def submit(self, raw: RawMessage) -> bool:
        """Durably accept a message. Returns True once it is safe to ack at the source.

        Taking it in starts once it is committed, while its flush runs (decision 0098); what a
        person sees of it (acknowledgement, refusal) waits for the flush
        (``Scheduler.hold_notices``), as the ack at the source waits for this return."""
        if raw.channel not in self._adapters:
            raise ValueError(f"message from unknown channel {raw.channel!r}")
        reached("received")

        def committed(task_id: str, task: TaskRecord | None, on_disk: asyncio.Future[None]) -> None:
            if task is not None and self.accepting:
                self._scheduler.hold_notices(task_id, on_disk)
                self.take_in(task_id, raw.channel, task)

        task_id, is_new = await self._store.accept_inbound(raw, committed, taking_in=self.accepting)
        reached("stored")
        if not is_new:
            log.info(
                "duplicate delivery of %s/%s (task %s) ignored",
                raw.channel,
                raw.message_id,
                task_id,
            )
        return True

    async def submit_scheduled(self, raw: RawMessage) -> str:
        """A schedule's run enters intake like a message (same dedup by message id)."""
        task_id, is_new = await self._store.accept_inbound(raw)
        if is_new and self.accepting:
            self.take_in(task_id)
        return task_id

    async def take_in_channel(self, channel: str) -> None:
        """Take in every message of ``channel`` stored but not routed (queued, or held
        mid-authentication by a replica that no longer holds the channel)."""
        for task in await self._store.tasks_in_states([TaskState.QUEUED, TaskState.AUTHENTICATING]):
            if task.channel != channel:
                continue
            if task.state is TaskState.AUTHENTICATING and task.id not in self._taking_in:
                task = await self._store.transition(task.id, TaskState.QUEUED)
            self.take_in(task.id)

    def take_in(
        self, task_id: str, channel: str | None = None, known: TaskRecord | None = None
    ) -> None:
        """Start taking in a stored task, unless it is being taken in already.
        ``channel``: the task's, when known (one read fewer before routing); ``known``: the
        task as just committed (routing's first attempt starts from it: one read fewer)."""
        if task_id in self._taking_in or self._jobs.closed:
            return
        self._taking_in.add(task_id)
        job = self._jobs.spawn(
            self._authenticate(task_id, channel, known), name=f"intake-{task_id}"
        )
        job.add_done_callback(lambda _: self._taking_in.discard(task_id))

    async def _authenticate(
        self, task_id: str, channel: str | None = None, known: TaskRecord | None = None
    ) -> None:
        """Authenticate and route one message. Serialised per channel, so messages reach
        their conversation (and commands take effect) in the order they arrived. A transport
        failure is retried with the lock released between attempts: one unreachable room
        never holds up the others. Routing is idempotent by task state, so an attempt that
        failed half-way is safe to repeat. What routing leaves for after the lock (a /diff)
        is part of the attempt: a transient failure there routes the task again, and while
        it runs the task stays in ``_taking_in`` (a channel taken in again meanwhile does not
        start it twice)."""
        if channel is None:
            channel = (await self._store.get_task(task_id)).channel
        lock = self._locks[channel]

        async def attempt() -> None:
            nonlocal known
            first, known = known, None  # a later attempt reads the task as it is
            async with lock:
                after_lock = await self._route(task_id, first)
            if after_lock is not None:
                await after_lock()

        try:
            await call_channel(f"{channel}: taking in task {task_id}", attempt, self._policy)
        except Exception as exc:
            if not is_transient(exc):
                raise
            log.warning("task %s: %s stays unreachable; the sweep tries again", task_id, channel)
            if (await self._store.get_task(task_id)).state is TaskState.AUTHENTICATING:
                await self._store.transition(task_id, TaskState.QUEUED)
