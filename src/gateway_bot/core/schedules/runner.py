"""The schedule runner: turns due schedules into tasks of their conversation, exactly once.

Each tick (at start, then whenever the earliest schedule is due, at least every
``MAX_SLEEP_S``): runs recorded but not yet queued are queued (a crash between the two
left them), then every due schedule claims its latest due run (``claim_run``: the run row
and the next due time in one transaction) and only then is the run handed to the core's
intake, as a message whose id is the run's (schedule id, due time). The intake drops a
second delivery of an id it knows, so a run is one task whatever moment a crash hits.

Runs missed while the daemon was down: only the latest is considered, and it runs if it
is at most ``catch_up_minutes`` late; otherwise it is recorded as missed and the
conversation gets a note. Never a burst of catch-up runs.

A run is a task like any message (``GatewayService`` builds its message from the
/schedule message that made it: same conversation, sender, channel context), so it waits
for a running task, shows progress and obeys /stop. The conversation first gets a notice
"Scheduled run #ID", then the usual acknowledgement and reply.

The clock and the sleep are injected, so tests move time without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from gateway_bot.config.access import ScheduleLimits
from gateway_bot.core.channel import ChannelAdapter
from gateway_bot.core.schedules.rules import Rule, prompt_preview, show_time, slots_until
from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from gateway_bot.domain.messages import InboundMessage, RawMessage
from gateway_bot.domain.records import TaskRecord
from gateway_bot.state.schedules_store import (
    PAUSED,
    RUN_DUE,
    RUN_MESSAGE_PREFIX,
    RUN_MISSED,
    RunRecord,
    ScheduleRecord,
    SqlSchedules,
    run_message_id,
)
from gateway_bot.state.store import Store

log = logging.getLogger(__name__)

FAILURES_BEFORE_PAUSE = 3
"""A schedule whose last this many runs all failed is paused (with a note) instead of
running again."""
MAX_SLEEP_S = 30.0
"""The longest the runner sleeps between ticks (a changed clock is noticed by then)."""
NOTICE_TIMEOUT_S = 10.0
FAILED_TICK_PAUSE_S = 5.0
ELSEWHERE_POLL_S = 1.0
"""Under replicas: how soon a replica looks again at a run due in a channel whose listener
runs elsewhere (that replica fires it; this one only must not spin on it meanwhile)."""

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
SubmitRun = Callable[[RawMessage], Awaitable[str]]
"""Hands a run to the core's intake (idempotent by message id); returns its task id."""


def rule_of(schedule: ScheduleRecord) -> Rule:
    return Rule(schedule.kind, schedule.expression, schedule.timezone)


class ScheduleRunner:
    def __init__(
        self,
        store: SqlSchedules,
        adapters: Mapping[str, ChannelAdapter],
        submit_run: SubmitRun,
        limits: ScheduleLimits,
        tasks: Store,
        *,
        clock: Clock = time.time,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.store = store
        self._adapters = adapters
        self._submit_run = submit_run
        self._limits = limits
        self._tasks = tasks
        self.clock = clock
        self._sleep = sleep
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self.fires_here: Callable[[str], bool] | None = None
        """Set under replicas (``core/replicas/duties.py``): whether this replica fires a channel's
        runs, i.e. holds its listener (the run's intake and notices belong there; a Matrix
        run could not be announced anywhere else). None: a single daemon fires them all."""
        self._left_elsewhere = False

    async def start(self) -> None:
        """Migrate, catch up once (missed runs, unqueued runs), then tick in the background."""
        await self.store.open()
        try:
            await self.tick()
        except Exception:
            log.exception("schedules: the first tick failed; trying again in the loop")
        self._loop = asyncio.create_task(self._tick_forever())

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
            self._loop = None

    def wake(self) -> None:
        """A schedule was made or resumed: look again now, not at the next timed tick."""
        self._wake.set()

    async def _tick_forever(self) -> None:
        while True:
            try:
                await self._sleep_until_due()
                await self.tick()
            except Exception:
                log.exception("schedules: a tick failed; trying again shortly")
                await self._sleep(FAILED_TICK_PAUSE_S)  # a run due now must not spin

    async def _sleep_until_due(self) -> None:
        self._wake.clear()
        earliest = await self.store.earliest_due()
        delay = MAX_SLEEP_S
        if earliest is not None:
            delay = min(MAX_SLEEP_S, max(0.0, earliest - self.clock()))
        if self._left_elsewhere:
            delay = max(delay, ELSEWHERE_POLL_S)
        sleeping = asyncio.ensure_future(self._sleep(delay))
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({sleeping, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeping.cancel()
            woken.cancel()

    async def tick(self) -> None:
        """Queue what a crash left recorded, then claim and queue every due run (under
        replicas, of the channels whose listener runs here)."""
        self._left_elsewhere = False
        for run in await self.store.unqueued_runs():
            if self.fires_here is not None:
                schedule = await self.store.get(run.schedule_id)
                if schedule is not None and not self.fires_here(schedule.channel):
                    self._left_elsewhere = True
                    continue
            await self._queue(run)
        now = self.clock()
        for schedule in await self.store.due(now):
            if self.fires_here is not None and not self.fires_here(schedule.channel):
                self._left_elsewhere = True
                continue
            await self._fire(schedule, now)

    async def _fire(self, schedule: ScheduleRecord, now: float) -> None:
        assert schedule.next_due is not None
        if await self._keeps_failing(schedule):
            await self.store.set_state(schedule.id, PAUSED, None)
            await self._notice(
                schedule,
                f"Paused schedule #{schedule.id}: its last {FAILURES_BEFORE_PAUSE} runs failed. "
                f"/resume {schedule.id} to run it again.",
            )
            return
        count, latest, next_due = slots_until(rule_of(schedule), schedule.next_due, now)
        late = now - latest > self._limits.catch_up_minutes * 60
        state = RUN_MISSED if late else RUN_DUE
        if not await self.store.claim_run(schedule, latest, state, next_due):
            return
        skipped = count if late else count - 1
        if skipped:
            last = show_time(latest, schedule.timezone)
            await self._notice(
                schedule,
                f"Scheduled run #{schedule.id}: {skipped} run(s) due while the bot was down "
                f"were skipped (the last was due {last}; runs more than "
                f"{self._limits.catch_up_minutes:g} minutes late are not caught up).",
            )
        if not late:
            await self._queue(
                RunRecord(schedule.id, latest, RUN_DUE, run_message_id(schedule.id, latest), None)
            )

    async def _keeps_failing(self, schedule: ScheduleRecord) -> bool:
        """Checked when the next run is due, so it holds across restarts. A run stopped
        with /stop is not a failure; a run still going is not one yet."""
        runs = await self.store.latest_queued(schedule.id, FAILURES_BEFORE_PAUSE)
        if len(runs) < FAILURES_BEFORE_PAUSE:
            return False
        for run in runs:
            assert run.task_id is not None
            task = await self._tasks.get_task(run.task_id)
            if task.state is not TaskState.COMPLETED or task.completion_reason in (
                CompletionReason.SUCCESS,
                CompletionReason.CANCELLED,
            ):
                return False
        return True

    async def _queue(self, run: RunRecord) -> None:
        schedule = await self.store.get(run.schedule_id)
        if schedule is None:  # pragma: no cover - schedules are never deleted
            return
        when = show_time(run.due_at, schedule.timezone)
        text = f"Scheduled run #{schedule.id} (due {when}): {prompt_preview(schedule.prompt)}"
        await self._notice(schedule, text)
        raw = RawMessage(
            channel=schedule.channel,
            message_id=run.message_id,
            sender=schedule.creator_id,
            payload={"schedule_id": schedule.id, "due_at": run.due_at},
            received_at=run.due_at,
        )
        task_id = await self._submit_run(raw)
        await self.store.mark_queued(schedule.id, run.due_at, task_id)
        log.info("schedule %d: run due %s is task %s", schedule.id, when, task_id)

    async def _notice(self, schedule: ScheduleRecord, text: str) -> None:
        """Cosmetic (the run's reply follows anyway): one bounded attempt, failures logged."""
        adapter = self._adapters.get(schedule.channel)
        if adapter is None:
            return
        try:
            await asyncio.wait_for(
                adapter.send_rejection(schedule.origin.channel_context, text), NOTICE_TIMEOUT_S
            )
        except Exception:
            log.warning("schedule %d: could not post %r", schedule.id, text, exc_info=True)

    async def run_message(self, task: TaskRecord) -> InboundMessage | None:
        """The message a scheduled run's task carries, or None for any other task. Built
        from the /schedule message, so it goes where that was said, as its sender. A
        message id of another shape is no run: no read (decision 0104: every message asks)."""
        if not task.message_id.startswith(RUN_MESSAGE_PREFIX):
            return None
        run = await self.store.run_by_message(task.message_id)
        if run is None:
            return None
        schedule = await self.store.get(run.schedule_id)
        if schedule is None or schedule.channel != task.channel:
            return None
        when = show_time(run.due_at, schedule.timezone)
        return dataclasses.replace(
            schedule.origin,
            message_id=task.message_id,
            body=f"[Scheduled run #{schedule.id}, due {when}]\n{schedule.prompt}",
            received_at=run.due_at,
            attachments=(),
            context=(),
        )
