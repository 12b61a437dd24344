"""What ``/schedule`` means: WHEN parsed into a rule, and a rule's run times. Pure functions.

WHEN is a quoted cron expression (evaluated by cronsim, never by a parser of ours) or one of
a few plain phrases, each turned into a cron expression (recurring) or one local time
(one-off). A rule carries its time zone; run times are computed in it with zoneinfo, so a
daylight-saving change neither skips nor doubles a run: cronsim runs a time that falls in a
spring-forward gap once, at the first valid time after it, and a time that repeats on
fall-back once (its first occurrence); a one-off time in a gap moves to the first valid
minute the same way.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

CRON = "cron"
ONCE = "once"

DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_UNITS = {"minute": 60, "hour": 3600, "day": 86400}

_TZ = re.compile(r"^TZ=(\S+)\s+", re.IGNORECASE)
_QUOTED = re.compile(r"""^(["'])(.+?)\1\s*""")
_CLOCK = r"(\d{1,2})(?::(\d{2}))?"
_PHRASES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("weekday", re.compile(rf"^every\s+weekday\s+at\s+{_CLOCK}\s*", re.IGNORECASE)),
    ("day", re.compile(rf"^every\s+day\s+at\s+{_CLOCK}\s*", re.IGNORECASE)),
    (
        "dow",
        re.compile(rf"^every\s+({'|'.join(DAYS)})\s+at\s+{_CLOCK}\s*", re.IGNORECASE),
    ),
    ("every", re.compile(r"^every\s+(\d+)\s+(minute|hour)s?\s*", re.IGNORECASE)),
    ("in", re.compile(r"^in\s+(\d+)\s+(minute|hour|day)s?\s*", re.IGNORECASE)),
    ("tomorrow", re.compile(rf"^tomorrow\s+at\s+{_CLOCK}\s*", re.IGNORECASE)),
    ("at", re.compile(r"^at\s+(\d{4}-\d{2}-\d{2})[ T](\d{1,2}):(\d{2})\s*", re.IGNORECASE)),
)

USAGE = (
    'Usage: /schedule [TZ=Zone] WHEN PROMPT, where WHEN is a quoted cron rule ("0 9 * * 1-5") '
    "or one of: every weekday at 9:00, every day at 18:30, every monday at 8, "
    "every 30 minutes, in 2 hours, tomorrow at 7:15, at 2026-12-01 09:00."
)


class ScheduleError(ValueError):
    """The WHEN or zone a user typed cannot be used; the text says why and what to type."""


@dataclass(frozen=True)
class Rule:
    kind: str
    """``cron`` (recurring) or ``once``."""
    expression: str
    """A cron expression, or for ``once`` the local time as ``YYYY-MM-DD HH:MM``."""
    timezone: str

    def describe(self) -> str:
        """The normalized rule, as the echo and /schedules show it."""
        if self.kind == ONCE:
            return f"once at {self.expression} ({self.timezone})"
        explained = CronSim(self.expression, dt.datetime(2000, 1, 1)).explain()
        return f'"{self.expression}" ({explained}, {self.timezone})'


@dataclass(frozen=True)
class ScheduleRequest:
    rule: Rule
    prompt: str


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f"Unknown time zone {name!r}: use an IANA name such as Europe/Berlin or UTC."
        ) from None


def parse_request(argument: str, default_zone: str, now: float) -> ScheduleRequest:
    """``[TZ=Zone] WHEN PROMPT`` -> a rule and the prompt; ScheduleError if unusable."""
    text = argument.strip()
    timezone = default_zone
    if found := _TZ.match(text):
        timezone = found.group(1)
        text = text[found.end() :]
    tz = zone(timezone)
    rule, rest = _parse_when(text, timezone, tz, now)
    prompt = rest.strip()
    if not prompt:
        raise ScheduleError(f"What should run then? {USAGE}")
    return ScheduleRequest(rule, prompt)


def parse_when(when: str, timezone: str, now: float) -> Rule:
    """A WHEN on its own (an agent's request file): a phrase, or a cron rule quoted or not;
    nothing may follow it. ScheduleError if unusable."""
    tz = zone(timezone)
    text = " ".join(when.split())
    if not _QUOTED.match(text) and not any(p.match(text) for _, p in _PHRASES):
        text = f'"{text}"'
    rule, rest = _parse_when(text, timezone, tz, now)
    if rest.strip():
        raise ScheduleError(f"Unexpected {rest.strip()!r} after the time in {when!r}. {USAGE}")
    return rule


def _parse_when(text: str, timezone: str, tz: ZoneInfo, now: float) -> tuple[Rule, str]:
    if quoted := _QUOTED.match(text):
        expression = " ".join(quoted.group(2).split())
        try:
            CronSim(expression, dt.datetime.now(tz))
        except CronSimError as exc:
            raise ScheduleError(f"Invalid cron rule {expression!r}: {exc}. {USAGE}") from None
        return Rule(CRON, expression, timezone), text[quoted.end() :]
    for form, pattern in _PHRASES:
        if found := pattern.match(text):
            return _phrase_rule(form, found, timezone, tz, now), text[found.end() :]
    raise ScheduleError(USAGE)


def _phrase_rule(form: str, found: re.Match[str], timezone: str, tz: ZoneInfo, now: float) -> Rule:
    groups = found.groups()
    if form in ("weekday", "day", "dow", "tomorrow"):
        hour, minute = _clock(groups[-2], groups[-1])
        days = {"weekday": "1-5", "day": "*", "tomorrow": ""}.get(form)
        if form == "dow":
            days = str((DAYS.index(groups[0].lower()) + 1) % 7)
        if form != "tomorrow":
            return Rule(CRON, f"{minute} {hour} * * {days}", timezone)
        tomorrow = dt.datetime.fromtimestamp(now, tz).date() + dt.timedelta(days=1)
        return _once(dt.datetime.combine(tomorrow, dt.time(hour, minute)), timezone)
    if form == "every":
        count, unit = int(groups[0]), groups[1].lower()
        if count < 1:
            raise ScheduleError("The interval must be at least 1.")
        if unit == "minute":
            if count > 59 or 60 % count:
                raise ScheduleError("Every N minutes needs N dividing 60 (5, 10, 15, 20, 30).")
            return Rule(CRON, f"*/{count} * * * *", timezone)
        if count > 23 or 24 % count:
            raise ScheduleError("Every N hours needs N dividing 24 (1, 2, 3, 4, 6, 8, 12).")
        return Rule(CRON, f"0 */{count} * * *" if count > 1 else "0 * * * *", timezone)
    if form == "in":
        try:
            at = dt.datetime.fromtimestamp(now + int(groups[0]) * _UNITS[groups[1].lower()], tz)
        except (OverflowError, OSError, ValueError):
            raise ScheduleError(f"in {groups[0]} {groups[1]}s is too far ahead.") from None
        return _once(at.replace(tzinfo=None, second=0, microsecond=0), timezone)
    try:
        day = dt.date.fromisoformat(groups[0])
    except ValueError:
        raise ScheduleError(f"{groups[0]!r} is not a date (YYYY-MM-DD).") from None
    hour, minute = _clock(groups[1], groups[2])
    return _once(dt.datetime.combine(day, dt.time(hour, minute)), timezone)


def _clock(hour_text: str, minute_text: str | None) -> tuple[int, int]:
    hour, minute = int(hour_text), int(minute_text or 0)
    if hour > 23 or minute > 59:
        raise ScheduleError(f"{hour_text}:{minute_text or '00'} is not a time of day.")
    return hour, minute


def _once(local: dt.datetime, timezone: str) -> Rule:
    return Rule(ONCE, f"{local:%Y-%m-%d %H:%M}", timezone)


def local_instant(naive: dt.datetime, tz: ZoneInfo) -> dt.datetime:
    """``naive`` wall time in ``tz``: in a fall-back repeat, its first occurrence; in a
    spring-forward gap, the first valid minute after it (02:30 -> 03:00)."""
    for minutes in range(0, 24 * 60):
        candidate = (naive + dt.timedelta(minutes=minutes)).replace(tzinfo=tz, fold=0)
        round_trip = candidate.astimezone(dt.UTC).astimezone(tz)
        if round_trip.replace(tzinfo=None) == candidate.replace(tzinfo=None):
            return candidate
    raise ScheduleError(f"{naive} does not exist in {tz.key}.")  # pragma: no cover


def next_runs(rule: Rule, after: float, count: int) -> list[float]:
    """The next ``count`` run times (epoch seconds) strictly after ``after``."""
    tz = zone(rule.timezone)
    if rule.kind == ONCE:
        naive = dt.datetime.strptime(rule.expression, "%Y-%m-%d %H:%M")
        at = local_instant(naive, tz).timestamp()
        return [at] if at > after else []
    runs: list[float] = []
    for when in CronSim(rule.expression, dt.datetime.fromtimestamp(after, tz)):
        stamp = when.timestamp()
        if stamp > after:
            runs.append(stamp)
        if len(runs) == count:
            break
    return runs


def shortest_gap_minutes(rule: Rule, after: float, sample: int = 200) -> float | None:
    """The shortest time between two of the next ``sample`` runs (None for a one-off): how
    a rule more frequent than the limit is found without reading cron fields ourselves."""
    if rule.kind == ONCE:
        return None
    runs = next_runs(rule, after, sample)
    gaps = [later - earlier for earlier, later in itertools.pairwise(runs)]
    return min(gaps) / 60 if gaps else None


def show_time(stamp: float, timezone: str) -> str:
    """A run time as the user reads it: their zone, with its abbreviation (CET, CEST)."""
    local = dt.datetime.fromtimestamp(stamp, zone(timezone))
    return f"{local:%a %Y-%m-%d %H:%M %Z}"


PROMPT_PREVIEW_CHARS = 120
"""How much of a schedule's prompt its confirmation and run notice show."""


def prompt_preview(prompt: str) -> str:
    """A schedule's prompt as the confirmation and each run's notice show it: one line,
    bounded, saying when it was cut (a page-long prompt echoed whole buried the answer's
    next runs and commands). The whole prompt is saved and runs; this is display only."""
    flat = " ".join(prompt.split())
    if len(flat) <= PROMPT_PREVIEW_CHARS:
        return flat
    return (
        f"{flat[:PROMPT_PREVIEW_CHARS].rstrip()}… (cut here: the whole prompt, "
        f"{len(prompt)} characters, is saved and runs)"
    )


def slots_until(rule: Rule, first_due: float, now: float) -> tuple[int, float, float | None]:
    """Runs due from ``first_due`` up to ``now``: how many, the latest, and the first run
    after ``now`` (None: no more). Used at each tick; after a long outage the count is how
    many runs were skipped."""
    count, latest = 1, first_due
    if rule.kind == ONCE:
        return count, latest, None
    for when in CronSim(rule.expression, dt.datetime.fromtimestamp(first_due, zone(rule.timezone))):
        stamp = when.timestamp()
        if stamp <= latest:
            continue
        if stamp > now:
            return count, latest, stamp
        count, latest = count + 1, stamp
    return count, latest, None  # pragma: no cover - cron rules never end
