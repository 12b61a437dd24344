"""/schedule, /schedules, /unschedule, /pause, /resume: what they answer and save.

Only senders the gate trusts in the conversation get here (the service answers commands
for them alone). A schedule belongs to the conversation it was made in (channel and
conversation key) and is managed only from there: ``/unschedule 3`` elsewhere answers
"no schedule #3 here". Everything is checked before anything is saved (zone, rule, a run
left, the minimum interval, the per-conversation limit), and the answer echoes the
normalized rule and the next three runs in the schedule's zone.
"""

from __future__ import annotations

from gateway_bot.config.access import AccessSettings
from gateway_bot.core.commands import Command, CommandName
from gateway_bot.core.schedule_rules import (
    USAGE,
    ScheduleError,
    next_runs,
    parse_request,
    shortest_gap_minutes,
    show_time,
)
from gateway_bot.core.schedules import ScheduleRunner, rule_of
from gateway_bot.domain.messages import InboundMessage
from gateway_bot.state.schedules_store import ACTIVE, PAUSED, REMOVED, ScheduleRecord

SCHEDULE_COMMANDS = frozenset(
    {
        CommandName.SCHEDULE,
        CommandName.SCHEDULES,
        CommandName.UNSCHEDULE,
        CommandName.PAUSE,
        CommandName.RESUME,
    }
)


class ScheduleCommands:
    def __init__(self, runner: ScheduleRunner, access: AccessSettings, server_zone: str) -> None:
        self._runner = runner
        self._store = runner.store
        self._access = access
        self._server_zone = server_zone

    def zone_for(self, message: InboundMessage) -> str:
        """The room's zone, else ``access.timezone``, else the server's (UTC by default)."""
        room = self._access.room_settings(message.channel, message.room)
        return room.timezone or self._access.timezone or self._server_zone

    async def answer(self, message: InboundMessage, command: Command) -> str:
        name = command.name
        if name is CommandName.SCHEDULE:
            return await self._schedule(message, command.argument)
        if name is CommandName.SCHEDULES:
            return await self._list(message)
        schedule = await self._find(message, command.argument)
        if isinstance(schedule, str):
            return schedule
        if name is CommandName.UNSCHEDULE:
            await self._store.set_state(schedule.id, REMOVED, None)
            return f"Removed schedule #{schedule.id}."
        if name is CommandName.PAUSE:
            if schedule.state == PAUSED:
                return f"Schedule #{schedule.id} is already paused."
            await self._store.set_state(schedule.id, PAUSED, None)
            return f"Paused schedule #{schedule.id}. /resume {schedule.id} to run it again."
        if schedule.state == ACTIVE:
            return f"Schedule #{schedule.id} is not paused."
        now = self._runner.clock()
        upcoming = next_runs(rule_of(schedule), now, 3)
        if not upcoming:
            return f"Schedule #{schedule.id} has no run left (its time has passed): /unschedule it."
        await self._store.resume(schedule.id, upcoming[0], now)
        self._runner.wake()
        return f"Resumed schedule #{schedule.id}. {_next(upcoming, schedule.timezone)}"

    async def _schedule(self, message: InboundMessage, argument: str) -> str:
        limits = self._access.schedules
        now = self._runner.clock()
        try:
            request = parse_request(argument, self.zone_for(message), now)
        except ScheduleError as exc:
            return f"Not scheduled: {exc}"
        rule = request.rule
        upcoming = next_runs(rule, now, 3)
        if not upcoming:
            return f"Not scheduled: {rule.describe()} is in the past."
        gap = shortest_gap_minutes(rule, now)
        if gap is not None and gap < limits.min_interval_minutes:
            return (
                f"Not scheduled: {rule.describe()} runs every {gap:g} minute(s); the shortest "
                f"interval allowed is {limits.min_interval_minutes:g} minutes."
            )
        saved = await self._store.create(
            message,
            rule.kind,
            rule.expression,
            rule.timezone,
            request.prompt,
            upcoming[0],
            limits.max_per_conversation,
        )
        if saved is None:
            return (
                f"Not scheduled: this conversation already has {limits.max_per_conversation} "
                "schedules (the most allowed). /schedules lists them; /unschedule ID removes one."
            )
        self._runner.wake()
        return (
            f"Scheduled #{saved.id}: {rule.describe()}: {request.prompt}\n"
            f"{_next(upcoming, rule.timezone)}\n"
            f"/pause {saved.id}, /resume {saved.id}, /unschedule {saved.id}."
        )

    async def _list(self, message: InboundMessage) -> str:
        schedules = await self._store.in_conversation(message.channel, message.conversation_key)
        if not schedules:
            return "No schedules in this conversation. " + USAGE
        lines = ["Schedules in this conversation:"]
        for schedule in schedules:
            if schedule.state == PAUSED:
                when = "paused"
            elif schedule.next_due is not None:
                when = f"next {show_time(schedule.next_due, schedule.timezone)}"
            else:  # pragma: no cover - listed states always have one
                when = "no run left"
            lines.append(
                f"#{schedule.id} {rule_of(schedule).describe()}, {when}: {schedule.prompt}"
            )
        return "\n".join(lines)

    async def _find(self, message: InboundMessage, argument: str) -> ScheduleRecord | str:
        text = argument.strip().lstrip("#")
        if not text.isdigit():
            return "Which schedule? Give its number, as /schedules lists them."
        schedule = await self._store.get(int(text))
        if (
            schedule is None
            or schedule.state not in (ACTIVE, PAUSED)
            or schedule.channel != message.channel
            or schedule.conversation_key != message.conversation_key
        ):
            return f"There is no schedule #{text} in this conversation (/schedules lists them)."
        return schedule


def _next(upcoming: list[float], timezone: str) -> str:
    return "Next runs: " + "; ".join(show_time(at, timezone) for at in upcoming) + "."
