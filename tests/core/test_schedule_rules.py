"""What a user types after /schedule and when it runs: each phrase form, quoted cron rules,
time zones, daylight-saving days both ways, and the errors for what cannot be used."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from gateway_bot.core.schedules.rules import (
    ScheduleError,
    next_runs,
    parse_request,
    parse_when,
    shortest_gap_minutes,
    show_time,
)

BERLIN = ZoneInfo("Europe/Berlin")
NOW = dt.datetime(2026, 11, 24, 10, 0, tzinfo=dt.UTC).timestamp()
"""Tuesday 2026-11-24 10:00 UTC (11:00 in Berlin)."""


def shown(stamps: list[float], zone: str) -> list[str]:
    return [show_time(s, zone) for s in stamps]


@pytest.mark.parametrize(
    ("typed", "kind", "expression", "first_runs"),
    [
        (
            "every weekday at 9:00 check the build",
            "cron",
            "0 9 * * 1-5",
            ["Wed 2026-11-25 09:00 UTC", "Thu 2026-11-26 09:00 UTC", "Fri 2026-11-27 09:00 UTC"],
        ),
        (
            "every day at 18:30 check the build",
            "cron",
            "30 18 * * *",
            ["Tue 2026-11-24 18:30 UTC", "Wed 2026-11-25 18:30 UTC", "Thu 2026-11-26 18:30 UTC"],
        ),
        (
            "every monday at 8 check the build",
            "cron",
            "0 8 * * 1",
            ["Mon 2026-11-30 08:00 UTC", "Mon 2026-12-07 08:00 UTC", "Mon 2026-12-14 08:00 UTC"],
        ),
        (
            "every 30 minutes check the build",
            "cron",
            "*/30 * * * *",
            ["Tue 2026-11-24 10:30 UTC", "Tue 2026-11-24 11:00 UTC", "Tue 2026-11-24 11:30 UTC"],
        ),
        ("in 2 hours check the build", "once", "2026-11-24 12:00", ["Tue 2026-11-24 12:00 UTC"]),
        ("in 1 day check the build", "once", "2026-11-25 10:00", ["Wed 2026-11-25 10:00 UTC"]),
        (
            "tomorrow at 7:15 check the build",
            "once",
            "2026-11-25 07:15",
            ["Wed 2026-11-25 07:15 UTC"],
        ),
        (
            "at 2026-12-01 09:00 check the build",
            "once",
            "2026-12-01 09:00",
            ["Tue 2026-12-01 09:00 UTC"],
        ),
        (
            '"0 9 * * 1-5" check the build',
            "cron",
            "0 9 * * 1-5",
            ["Wed 2026-11-25 09:00 UTC", "Thu 2026-11-26 09:00 UTC", "Fri 2026-11-27 09:00 UTC"],
        ),
        (
            "'15   */6 * * *' check the build",
            "cron",
            "15 */6 * * *",
            ["Tue 2026-11-24 12:15 UTC", "Tue 2026-11-24 18:15 UTC", "Wed 2026-11-25 00:15 UTC"],
        ),
    ],
)
def test_each_form_of_when(typed: str, kind: str, expression: str, first_runs: list[str]) -> None:
    request = parse_request(typed, "UTC", NOW)
    assert (request.rule.kind, request.rule.expression) == (kind, expression)
    assert request.prompt == "check the build"
    assert shown(next_runs(request.rule, NOW, 3), "UTC") == first_runs


def test_a_zone_given_with_tz_wins_and_times_show_in_it() -> None:
    request = parse_request("TZ=Europe/Berlin every weekday at 9:00 check", "UTC", NOW)
    assert request.rule.timezone == "Europe/Berlin"
    assert (
        request.rule.describe()
        == '"0 9 * * 1-5" (At 09:00 on Monday through Friday, Europe/Berlin)'
    )
    runs = next_runs(request.rule, NOW, 1)
    assert shown(runs, "Europe/Berlin") == ["Wed 2026-11-25 09:00 CET"]
    assert shown(runs, "UTC") == ["Wed 2026-11-25 08:00 UTC"]


def test_tomorrow_is_the_users_tomorrow() -> None:
    late = dt.datetime(2026, 11, 24, 23, 30, tzinfo=dt.UTC).timestamp()  # 00:30 in Berlin
    request = parse_request("tomorrow at 7:15 x", "Europe/Berlin", late)
    assert request.rule.expression == "2026-11-26 07:15"


def test_spring_forward_runs_once_at_the_first_valid_time() -> None:
    """2026-03-29 in Berlin: 02:00 jumps to 03:00; a 02:30 run runs at 03:00 that day."""
    rule = parse_request('TZ=Europe/Berlin "30 2 * * *" x', "UTC", NOW).rule
    start = dt.datetime(2026, 3, 27, 12, 0, tzinfo=BERLIN).timestamp()
    assert shown(next_runs(rule, start, 4), "Europe/Berlin") == [
        "Sat 2026-03-28 02:30 CET",
        "Sun 2026-03-29 03:00 CEST",
        "Mon 2026-03-30 02:30 CEST",
        "Tue 2026-03-31 02:30 CEST",
    ]
    once = parse_request("TZ=Europe/Berlin at 2027-03-28 02:30 x", "UTC", NOW).rule
    assert shown(next_runs(once, NOW, 3), "Europe/Berlin") == ["Sun 2027-03-28 03:00 CEST"]


def test_fall_back_runs_once() -> None:
    """2026-10-25 in Berlin: 03:00 goes back to 02:00; 02:30 happens twice, runs once."""
    rule = parse_request('TZ=Europe/Berlin "30 2 * * *" x', "UTC", NOW).rule
    start = dt.datetime(2026, 10, 23, 12, 0, tzinfo=BERLIN).timestamp()
    runs = next_runs(rule, start, 4)
    assert shown(runs, "Europe/Berlin") == [
        "Sat 2026-10-24 02:30 CEST",
        "Sun 2026-10-25 02:30 CEST",
        "Mon 2026-10-26 02:30 CET",
        "Tue 2026-10-27 02:30 CET",
    ]
    # Asked again from just after the first 02:30 (inside the repeated hour): not again.
    assert next_runs(rule, runs[1] + 60, 1) == [runs[2]]
    once = parse_request("TZ=Europe/Berlin at 2027-10-31 02:30 x", "UTC", NOW).rule
    assert shown(next_runs(once, NOW, 3), "Europe/Berlin") == ["Sun 2027-10-31 02:30 CEST"]


def test_the_interval_of_a_rule() -> None:
    every_minute = parse_request('"* * * * *" x', "UTC", NOW).rule
    assert shortest_gap_minutes(every_minute, NOW) == 1
    assert shortest_gap_minutes(parse_request('"0,2 9 * * *" x', "UTC", NOW).rule, NOW) == 2
    assert shortest_gap_minutes(parse_request("in 2 hours x", "UTC", NOW).rule, NOW) is None


@pytest.mark.parametrize(
    ("typed", "says"),
    [
        ('"61 * * * *" x', "Invalid cron rule '61 * * * *'"),
        ('"0 9 * *" x', "Invalid cron rule '0 9 * *'"),
        ("TZ=Mars/Olympus every day at 9 x", "Unknown time zone 'Mars/Olympus'"),
        ("every day at 25:00 x", "25:00 is not a time of day"),
        ("at 2026-02-30 09:00 x", "'2026-02-30' is not a date"),
        ("every 7 minutes x", "Every N minutes needs N dividing 60"),
        ("in 9999999 days x", "in 9999999 days is too far ahead"),
        ("in 99999999999999999999999 hours x", "is too far ahead"),
        ("every day at 9", "What should run then?"),
        ("whenever you like x", "Usage: /schedule"),
        ("", "Usage: /schedule"),
    ],
)
def test_what_cannot_be_used_says_why(typed: str, says: str) -> None:
    with pytest.raises(ScheduleError) as raised:
        parse_request(typed, "UTC", NOW)
    assert says in str(raised.value)


def test_a_when_on_its_own_as_an_agent_request_gives_it() -> None:
    assert parse_when("0 9 * * 1-5", "Europe/Berlin", NOW).expression == "0 9 * * 1-5"
    assert parse_when('"30 2 * * *"', "UTC", NOW).expression == "30 2 * * *"
    once = parse_when("tomorrow at 7:15", "Asia/Tokyo", NOW)
    assert (once.kind, once.expression, once.timezone) == ("once", "2026-11-25 07:15", "Asia/Tokyo")
    with pytest.raises(ScheduleError, match="Unexpected 'and more'"):
        parse_when("every day at 9:00 and more", "UTC", NOW)
    with pytest.raises(ScheduleError, match="Invalid cron rule"):
        parse_when("every fortnight", "UTC", NOW)
    with pytest.raises(ScheduleError, match="Unknown time zone"):
        parse_when("in 2 hours", "../../etc/passwd", NOW)
