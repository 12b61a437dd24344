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
from gateway_bot.core.commands.parse import Command, CommandName, command_words
from gateway_bot.core.schedules.rules import (
    USAGE,
    Rule,
    ScheduleError,
    next_runs,
    parse_request,
    prompt_preview,
    shortest_gap_minutes,
    show_time,
)
from gateway_bot.core.schedules.runner import ScheduleRunner, rule_of
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

    def clock(self) -> float:
        """Now, as the schedule runner sees it (a test may move it)."""
        return self._runner.clock()

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
        # The number read as /revoke's names are (quotes: '/pause "3"'); an open quote is
        # ArgumentError, answered by ChatCommands.
        schedule = await self._find(message, " ".join(command_words(command.argument)))
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
        try:
            request = parse_request(argument, self.zone_for(message), self._runner.clock())
        except ScheduleError as exc:
            return f"Not scheduled: {exc}"
        return await self.create(message, request.rule, request.prompt)

    async def refusal(self, origin: InboundMessage, rule: Rule) -> str | None:
        """Why ``rule`` cannot be saved in ``origin``'s conversation now (no run left, too
        frequent, the conversation full), or None."""
        limits = self._access.schedules
        now = self._runner.clock()
        if not next_runs(rule, now, 1):
            return f"Not scheduled: {rule.describe()} is in the past."
        gap = shortest_gap_minutes(rule, now)
        if gap is not None and gap < limits.min_interval_minutes:
            return (
                f"Not scheduled: {rule.describe()} runs every {gap:g} minute(s); the shortest "
                f"interval allowed is {limits.min_interval_minutes:g} minutes."
            )
        existing = await self._store.in_conversation(origin.channel, origin.conversation_key)
        if len(existing) >= limits.max_per_conversation:
            return self._full()
        return None

    async def create(self, origin: InboundMessage, rule: Rule, prompt: str) -> str:
        """Check everything, save, echo the rule and its next runs: for /schedule and for
        an agent's proposal someone allowed (``core/schedules/proposals.py``)."""
        if refused := await self.refusal(origin, rule):
            return refused
        upcoming = next_runs(rule, self._runner.clock(), 3)
        saved = await self._store.create(
            origin,
            rule.kind,
            rule.expression,
            rule.timezone,
            prompt,
            upcoming[0],
            self._access.schedules.max_per_conversation,
        )
        if saved is None:  # a schedule made meanwhile filled the conversation
            return self._full()
        self._runner.wake()
        return (
            f"Scheduled #{saved.id}: {rule.describe()}: {prompt_preview(prompt)}\n"
            f"{_next(upcoming, rule.timezone)}\n"
            f"/pause {saved.id}, /resume {saved.id}, /unschedule {saved.id}."
        )

    def _full(self) -> str:
        most = self._access.schedules.max_per_conversation
        return (
            f"Not scheduled: this conversation already has {most} schedules (the most "
            "allowed). /schedules lists them; /unschedule ID removes one."
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
        # ASCII digits only (str.isdigit also takes other scripts' digits and superscripts),
        # and few enough to be a database integer: a longer number is no schedule of ours.
        if not (text.isascii() and text.isdigit()):
            return "Which schedule? Give its number, as /schedules lists them."
        fits = len(text) <= _ID_DIGITS and int(text) < _LARGEST_ID
        schedule = await self._store.get(int(text)) if fits else None
        if (
            schedule is None
            or schedule.state not in (ACTIVE, PAUSED)
            or schedule.channel != message.channel
            or schedule.conversation_key != message.conversation_key
        ):
            shown = text if len(text) <= _ID_DIGITS else text[:_ID_DIGITS] + "…"
            return f"There is no schedule #{shown} in this conversation (/schedules lists them)."
        return schedule


_LARGEST_ID = 2**63
"""One past the largest integer a SQLite or PostgreSQL BIGINT column holds."""
_ID_DIGITS = len(str(_LARGEST_ID))


def _next(upcoming: list[float], timezone: str) -> str:
    return "Next runs: " + "; ".join(show_time(at, timezone) for at in upcoming) + "."
