"""Scheduled runs as people see them in a conversation: /schedule echoes and saves, a due run
posts "Scheduled run #ID" and its reply where it was made, runs wait their turn, /pause,
/resume and /unschedule take effect, limits and strangers are refused, and a due run is
one task across restarts and crashes, with at most one catch-up after an outage.

Time is a fake clock the runner reads; a tick is called where a real daemon would wake.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway_bot.core.schedules.rules import USAGE, show_time
from gateway_bot.core.schedules.runner import ScheduleRunner
from gateway_bot.core.service import GatewayService
from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from gateway_bot.domain.messages import RawMessage
from gateway_bot.state.database import StateTarget
from gateway_bot.state.schedules_store import RUN_DUE, SqlSchedules, run_message_id
from tests.core.conftest import World, owners_access

UTC = dt.UTC


def at(text: str) -> float:
    """A UTC wall time such as "2026-11-24 10:00" as epoch seconds."""
    return dt.datetime.strptime(text, "%Y-%m-%d %H:%M").replace(tzinfo=UTC).timestamp()


async def _never(_: float) -> None:
    await asyncio.Event().wait()


class ScheduleWorld(World):
    """The core world with schedules, a clock the test moves, and a runner that never
    wakes by itself (ticks are the test's)."""

    def __init__(self, tmp_path: Path, **kwargs: Any) -> None:
        super().__init__(tmp_path, **kwargs)
        self.now = at("2026-11-24 10:00")
        self.sleep: Callable[[float], Awaitable[None]] = _never

    async def start(self) -> GatewayService:
        if not self._opened:
            await self.store.open()
            self._opened = True
        self.service = GatewayService(
            self.store,
            {self.channel.name: self.channel},  # type: ignore[dict-item]
            self.agent,
            access=self.access,
            timezone="UTC",
            max_concurrent_tasks=self.max_concurrent,
            max_pending_per_conversation=self.max_pending,
            retry_policy=self.policy,
            sweep_interval_s=0.05,
            schedules=SqlSchedules(self.store.database),
            schedule_clock=lambda: self.now,
            schedule_sleep=self.sleep,
        )
        await self.service.start()
        return self.service

    @property
    def runner(self) -> ScheduleRunner:
        assert self.service is not None
        assert self.service.schedules is not None
        return self.service.schedules

    async def advance_to(self, when: str) -> None:
        self.now = at(when)
        await self.runner.tick()

    async def command(self, text: str, *, room: str = "dm", sender: str = "alice") -> str:
        return (await self.reply(await self.say(text, room=room, sender=sender))).text

    async def scheduled_tasks(self) -> list[str]:
        rows = await self.store.database.fetch_all(
            "SELECT id FROM tasks WHERE message_id LIKE 'gateway-bot-schedule|%' ORDER BY rowid"
        )
        return [str(row["id"]) for row in rows]


@pytest.fixture
async def sworld(tmp_path: Path, state_target: StateTarget) -> AsyncIterator[ScheduleWorld]:
    """On both engines."""
    made = ScheduleWorld(tmp_path, state=state_target)
    await made.start()
    yield made
    await made.close()


async def test_schedule_echoes_the_rule_and_next_runs_then_lists_it(sworld: ScheduleWorld) -> None:
    answer = await sworld.command("/schedule TZ=Europe/Berlin every weekday at 9:00 check CI")
    assert answer == (
        'Scheduled #1: "0 9 * * 1-5" (At 09:00 on Monday through Friday, Europe/Berlin): '
        "check CI\n"
        "Next runs: Wed 2026-11-25 09:00 CET; Thu 2026-11-26 09:00 CET; "
        "Fri 2026-11-27 09:00 CET.\n"
        "/pause 1, /resume 1, /unschedule 1."
    )
    listing = await sworld.command("/schedules")
    assert listing == (
        "Schedules in this conversation:\n"
        '#1 "0 9 * * 1-5" (At 09:00 on Monday through Friday, Europe/Berlin), '
        "next Wed 2026-11-25 09:00 CET: check CI"
    )
    assert await sworld.command("/schedules", room="elsewhere") == (
        "No schedules in this conversation. " + USAGE
    )


async def test_the_rooms_zone_then_the_deployments_apply_without_tz(tmp_path: Path) -> None:
    access = owners_access(
        timezone="America/New_York", rooms=[{"match": "tokyo", "timezone": "Asia/Tokyo"}]
    )
    world = ScheduleWorld(tmp_path, access=access)
    await world.start()
    try:
        tokyo = await world.command("/schedule every day at 9:00 x", room="tokyo")
        assert "Asia/Tokyo" in tokyo
        assert "Next runs: Wed 2026-11-25 09:00 JST;" in tokyo
        dm = await world.command("/schedule every day at 9:00 x")
        # 10:00 UTC is 05:00 in New York: today's 09:00 is still ahead there.
        assert "America/New_York" in dm
        assert "Next runs: Tue 2026-11-24 09:00 EST;" in dm
    finally:
        await world.close()


async def test_a_due_run_posts_its_notice_and_reply_in_the_conversation(
    sworld: ScheduleWorld,
) -> None:
    await sworld.command("/schedule in 2 hours summarise the nightly build", room="ops")
    await sworld.advance_to("2026-11-24 11:59")
    assert await sworld.scheduled_tasks() == [], "not due yet"
    await sworld.advance_to("2026-11-24 12:00")
    [task_id] = await sworld.scheduled_tasks()
    await sworld.until(lambda: len(sworld.replies("ops")) == 2, "the run's reply")
    await sworld.idle()
    assert sworld.channel.texts("ops", "rejection") == [
        "Scheduled run #1 (due Tue 2026-11-24 12:00 UTC): summarise the nightly build"
    ]
    assert sworld.replies("ops")[-1] == (
        "Echo: [Scheduled run #1, due Tue 2026-11-24 12:00 UTC]\nsummarise the nightly build"
    )
    assert "[Message from Alice <alice> via fake" in sworld.agent.prompts[-1]
    task = await sworld.store.get_task(task_id)
    assert task.state is TaskState.COMPLETED
    assert task.reply_delivered
    # A one-off is done once it ran: not listed, never again.
    await sworld.advance_to("2026-11-25 12:00")
    assert await sworld.scheduled_tasks() == [task_id]
    assert (await sworld.command("/schedules", room="ops")).startswith("No schedules")


async def test_a_run_waits_for_the_running_task(sworld: ScheduleWorld) -> None:
    await sworld.command("/schedule every day at 18:30 nightly report")
    busy = await sworld.say("long job hold:busy")
    await sworld.until(lambda: sworld.agent.running, "the long job running")
    await sworld.advance_to("2026-11-24 18:30")
    await sworld.until(
        lambda: "Queued behind 1 task(s)." in sworld.channel.texts("dm", "ack"), "the run's ack"
    )
    assert sworld.agent.bodies()[-1] == "long job hold:busy", "the run has not started"
    sworld.agent.release("busy")
    await sworld.reply(busy)
    await sworld.until(lambda: len(sworld.agent.runs) == 2, "the run after the job")
    assert sworld.agent.bodies()[-1].endswith("nightly report")


async def test_pause_resume_and_unschedule(sworld: ScheduleWorld) -> None:
    await sworld.command("/schedule every day at 18:30 report")
    assert await sworld.command("/pause 1") == "Paused schedule #1. /resume 1 to run it again."
    assert await sworld.command("/pause 1") == "Schedule #1 is already paused."
    listing = await sworld.command("/schedules")
    assert listing.startswith("Schedules in this conversation:\n#1 ")
    assert ", paused: report" in listing
    await sworld.advance_to("2026-11-25 19:00")
    assert await sworld.scheduled_tasks() == [], "a paused schedule does not run"
    assert await sworld.command("/resume 1") == (
        "Resumed schedule #1. Next runs: Thu 2026-11-26 18:30 UTC; "
        "Fri 2026-11-27 18:30 UTC; Sat 2026-11-28 18:30 UTC."
    )
    await sworld.advance_to("2026-11-26 18:30")
    assert len(await sworld.scheduled_tasks()) == 1
    assert await sworld.command("/unschedule 1", room="elsewhere") == (
        "There is no schedule #1 in this conversation (/schedules lists them)."
    )
    assert await sworld.command("/unschedule 1") == "Removed schedule #1."
    await sworld.advance_to("2026-11-27 18:30")
    assert len(await sworld.scheduled_tasks()) == 1, "a removed schedule does not run"
    assert await sworld.command("/resume 1") == (
        "There is no schedule #1 in this conversation (/schedules lists them)."
    )
    assert await sworld.command("/pause x") == (
        "Which schedule? Give its number, as /schedules lists them."
    )


async def test_refusals_save_nothing(tmp_path: Path) -> None:
    access = owners_access(schedules={"max_per_conversation": 2, "min_interval_minutes": 5})
    world = ScheduleWorld(tmp_path, access=access)
    await world.start()
    try:
        assert await world.command('/schedule "*/2 * * * *" poll') == (
            'Not scheduled: "*/2 * * * *" (Every second minute of every hour, UTC) runs '
            "every 2 minute(s); the shortest interval allowed is 5 minutes."
        )
        assert (await world.command('/schedule "0 9 * *" x')).startswith(
            "Not scheduled: Invalid cron rule '0 9 * *'"
        )
        assert (await world.command("/schedule TZ=Nowhere/Land every day at 9 x")).startswith(
            "Not scheduled: Unknown time zone 'Nowhere/Land'"
        )
        assert await world.command("/schedule at 2026-01-01 09:00 x") == (
            "Not scheduled: once at 2026-01-01 09:00 (UTC) is in the past."
        )
        assert (await world.command("/schedules")).startswith("No schedules")
        await world.command("/schedule every day at 9 a")
        await world.command("/schedule every day at 10 b")
        assert await world.command("/schedule every day at 11 c") == (
            "Not scheduled: this conversation already has 2 schedules (the most allowed). "
            "/schedules lists them; /unschedule ID removes one."
        )
        assert (await world.command("/schedules")).count("\n#") == 2
    finally:
        await world.close()


async def test_a_stranger_cannot_schedule(sworld: ScheduleWorld) -> None:
    message = await sworld.say("/schedule in 1 hour rm -rf /", sender="mallory")
    task = await sworld.completed(message)
    assert task.completion_reason is CompletionReason.UNAUTHORIZED
    assert sworld.replies() == []
    assert (await sworld.command("/schedules")).startswith("No schedules")


async def test_a_run_after_its_creator_was_revoked_does_not_run(tmp_path: Path) -> None:
    """Mallory is not in the channel's allowed users; an owner approved her in the room,
    she scheduled, then the owner revoked her: the run is dropped, nothing runs."""
    world = ScheduleWorld(tmp_path)
    await world.start()
    try:
        await world.store.approvals.add_member("fake", "dm", "mallory", "owner")
        answer = await world.command("/schedule in 1 hour x", sender="mallory")
        assert answer.startswith("Scheduled #1")
        assert await world.store.approvals.remove_member("fake", "mallory", None) == 1
        await world.advance_to("2026-11-24 11:00")
        [task_id] = await world.scheduled_tasks()
        await world.idle()
        task = await world.store.get_task(task_id)
        assert task.state is TaskState.COMPLETED
        assert task.completion_reason is CompletionReason.UNAUTHORIZED
        assert world.agent.runs == []
    finally:
        await world.close()


async def test_a_run_after_its_creator_left_the_allowed_users_does_not_run(
    sworld: ScheduleWorld,
) -> None:
    """Alice was in the channel's allowed users when she scheduled; the owner removed her
    from them: her runs are dropped (the channel is asked again, not the verdict stored with
    the /schedule message). A channel that cannot tell right now delays the run."""
    assert (await sworld.command("/schedule every day at 18:30 report")).startswith("Scheduled")
    sworld.channel.fail("recheck", times=1)  # the homeserver is down for a moment
    await sworld.advance_to("2026-11-24 18:30")
    [first] = await sworld.scheduled_tasks()
    await sworld.idle()
    assert (await sworld.store.get_task(first)).completion_reason is CompletionReason.SUCCESS
    sworld.channel.allowed.discard("alice")
    await sworld.advance_to("2026-11-25 18:30")
    [_, second] = await sworld.scheduled_tasks()
    await sworld.idle()
    task = await sworld.store.get_task(second)
    assert task.completion_reason is CompletionReason.UNAUTHORIZED
    assert len(sworld.agent.runs) == 1


async def test_daylight_saving_days_run_once(sworld: ScheduleWorld) -> None:
    await sworld.command('/schedule TZ=Europe/Berlin "30 2 * * *" nightly')
    runs: list[str] = []
    # Every 10 minutes through the spring-forward and fall-back nights of 2027.
    for night in ("2027-03-27", "2027-10-30"):
        sworld.now = at(f"{night} 22:00")
        await sworld.command("/pause 1")
        await sworld.command("/resume 1")
        before = len(await sworld.scheduled_tasks())
        for step in range(0, 6 * 6):
            sworld.now = at(f"{night} 22:00") + step * 600
            await sworld.runner.tick()
        runs.append(f"{len(await sworld.scheduled_tasks()) - before}")
    assert runs == ["1", "1"]
    notices = [t for t in sworld.channel.texts("dm", "rejection") if t.startswith("Scheduled")]
    assert notices == [
        "Scheduled run #1 (due Sun 2027-03-28 03:00 CEST): nightly",
        "Scheduled run #1 (due Sun 2027-10-31 02:30 CEST): nightly",
    ]


async def test_a_due_run_is_one_task_across_restarts(sworld: ScheduleWorld) -> None:
    await sworld.command("/schedule every day at 18:30 report")
    await sworld.advance_to("2026-11-24 18:30")
    await sworld.advance_to("2026-11-24 18:31")
    await sworld.restart()
    await sworld.advance_to("2026-11-24 18:32")
    assert len(await sworld.scheduled_tasks()) == 1
    await sworld.until(lambda: sworld.agent.runs, "the run")
    await sworld.idle()
    assert len(sworld.agent.runs) == 1


async def test_a_crash_between_recording_and_queueing_runs_once(sworld: ScheduleWorld) -> None:
    """The daemon recorded the run, then died before the task existed; and again after
    the task existed but before the run was marked queued."""
    await sworld.command("/schedule every day at 18:30 report")
    schedules = sworld.runner.store
    [schedule] = await schedules.due(at("2026-11-24 18:30"))
    await sworld.stop()
    # Crash 1: the run is recorded (and the schedule moved on), nothing queued.
    assert await schedules.claim_run(
        schedule, at("2026-11-24 18:30"), RUN_DUE, at("2026-11-25 18:30")
    )
    # Crash 2 (the next day's run): the task was accepted, the run not marked queued.
    [schedule] = await schedules.due(at("2026-11-25 18:30"))
    assert await schedules.claim_run(
        schedule, at("2026-11-25 18:30"), RUN_DUE, at("2026-11-26 18:30")
    )
    second = run_message_id(1, at("2026-11-25 18:30"))
    await sworld.store.accept_inbound(
        RawMessage("fake", second, "alice", {"schedule_id": 1}, at("2026-11-25 18:30"))
    )
    sworld.now = at("2026-11-25 18:31")
    await sworld.start()
    await sworld.until(lambda: len(sworld.agent.runs) == 2, "both runs")
    await sworld.idle()
    assert len(await sworld.scheduled_tasks()) == 2
    assert sorted(m.body.splitlines()[0] for m in sworld.agent.runs) == [
        "[Scheduled run #1, due Tue 2026-11-24 18:30 UTC]",
        "[Scheduled run #1, due Wed 2026-11-25 18:30 UTC]",
    ]
    assert await schedules.unqueued_runs() == []


async def test_an_outage_gives_at_most_one_catch_up_run(sworld: ScheduleWorld) -> None:
    await sworld.command("/schedule every day at 18:30 report")
    await sworld.stop()
    # Down for three runs; back 30 minutes after the last: it runs, once.
    sworld.now = at("2026-11-26 19:00")
    await sworld.start()
    await sworld.until(lambda: sworld.agent.runs, "the catch-up run")
    await sworld.idle()
    assert len(await sworld.scheduled_tasks()) == 1
    assert sworld.agent.bodies()[0].startswith("[Scheduled run #1, due Thu 2026-11-26 18:30 UTC]")
    assert sworld.channel.texts("dm", "rejection")[0] == (
        "Scheduled run #1: 2 run(s) due while the bot was down were skipped (the last was due "
        "Thu 2026-11-26 18:30 UTC; runs more than 60 minutes late are not caught up)."
    )
    # Down again; back two hours after the run: skipped with a note, next one as usual.
    await sworld.stop()
    sworld.now = at("2026-11-27 20:30")
    await sworld.start()
    await sworld.idle()
    assert len(await sworld.scheduled_tasks()) == 1
    assert sworld.channel.texts("dm", "rejection")[-1] == (
        "Scheduled run #1: 1 run(s) due while the bot was down were skipped (the last was due "
        "Fri 2026-11-27 18:30 UTC; runs more than 60 minutes late are not caught up)."
    )
    assert "next Sat 2026-11-28 18:30 UTC" in await sworld.command("/schedules")


async def test_stop_cancels_a_scheduled_run(sworld: ScheduleWorld) -> None:
    await sworld.command("/schedule in 1 hour slow hold:never")
    await sworld.advance_to("2026-11-24 11:00")
    await sworld.until(lambda: sworld.agent.running, "the run running")
    assert (await sworld.command("/stop")).startswith("Stopping task")
    [task_id] = await sworld.scheduled_tasks()
    await sworld.until(lambda: task_id in sworld.agent.cancelled, "the run cancelled")


async def test_three_failed_runs_in_a_row_pause_the_schedule(sworld: ScheduleWorld) -> None:
    await sworld.command("/schedule every day at 18:30 crash")
    for day in ("24", "25", "26"):
        await sworld.advance_to(f"2026-11-{day} 18:30")
        await sworld.idle()
    tasks = await sworld.scheduled_tasks()
    assert len(tasks) == 3
    for task_id in tasks:
        task = await sworld.store.get_task(task_id)
        assert task.completion_reason is CompletionReason.INTERNAL_ERROR
    await sworld.advance_to("2026-11-27 18:30")
    assert len(await sworld.scheduled_tasks()) == 3, "no fourth run"
    assert sworld.channel.texts("dm", "rejection")[-1] == (
        "Paused schedule #1: its last 3 runs failed. /resume 1 to run it again."
    )
    assert ", paused: crash" in await sworld.command("/schedules")
    assert (await sworld.command("/resume 1")).startswith("Resumed schedule #1. Next runs: Sat")
    await sworld.advance_to("2026-11-28 18:30")
    assert len(await sworld.scheduled_tasks()) == 4, "resumed: the failures start a new count"


async def test_the_runner_wakes_by_itself_when_a_run_is_due(tmp_path: Path) -> None:
    """No tick by hand: the runner's own loop sleeps (in virtual time: the fake sleep moves
    the clock, from when the schedule exists until the run fired) and fires the run."""
    world = ScheduleWorld(tmp_path)
    scheduled = asyncio.Event()

    async def virtual_sleep(seconds: float) -> None:
        await scheduled.wait()
        if world.channel.texts("dm", "rejection"):  # the run's notice: it fired
            await asyncio.Event().wait()
        world.now += seconds
        await asyncio.sleep(0)

    world.sleep = virtual_sleep
    await world.start()
    try:
        await world.command("/schedule in 2 hours wake up")
        scheduled.set()
        await world.until(lambda: world.agent.runs, "the run")
        assert world.agent.bodies() == ["[Scheduled run #1, due Tue 2026-11-24 12:00 UTC]\nwake up"]
        assert world.now == at("2026-11-24 12:00"), "it slept until the run was due, no longer"
    finally:
        await world.close()


async def test_retention_keeps_each_schedules_latest_runs(sworld: ScheduleWorld) -> None:
    await sworld.command("/schedule every day at 18:30 report")
    for day in ("24", "25", "26", "27", "28"):
        await sworld.advance_to(f"2026-11-{day} 18:30")
        await sworld.idle()
    pruned = await sworld.store.database.prune(sworld.now + 86400 * 365)
    assert pruned["schedules"] == 2
    runs = await sworld.runner.store.runs(1)
    assert [show_time(r.due_at, "UTC")[:14] for r in runs] == [
        "Thu 2026-11-26",
        "Fri 2026-11-27",
        "Sat 2026-11-28",
    ]
    assert "next Sun 2026-11-29 18:30 UTC" in await sworld.command("/schedules")
