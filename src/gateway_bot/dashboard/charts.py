"""The charts page's numbers and shapes: task durations and cost per day, and queue depth
over the last hours, as plain geometry a template draws as inline SVG (no script, no build).

Everything comes from the agent tasks' rows the store already keeps (commands, answered at
once, are left out by the query: a /help's zero seconds is no agent's run): ``created_at``
(accepted), ``started_at`` (its agent started) and ``completed_at``. The queue depth at a
moment is the number of tasks accepted and not yet started then (waiting for their turn, a
slot, or an approval); a task that ended without starting (refused, denied) waited until it
ended. So no samples are recorded, and the chart covers what the store still holds
(``state.retention_days``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from gateway_bot.domain.records import TaskRecord

DAYS = 14
QUEUE_HOURS = 6
QUEUE_STEP_S = 300
WIDTH = 720
HEIGHT = 200
MARGIN_LEFT = 56
MARGIN_BOTTOM = 28
MARGIN_TOP = 12


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str
    """Under the bar (the day)."""
    title: str
    """The tooltip: the exact value."""


@dataclass(frozen=True)
class BarChart:
    title: str
    bars: tuple[Bar, ...]
    top_label: str
    """The scale's top value, printed at the axis."""
    width: int = WIDTH
    height: int = HEIGHT


@dataclass(frozen=True)
class LineChart:
    title: str
    points: str
    """SVG polyline points ("x,y x,y ...")."""
    top_label: str
    first_label: str
    last_label: str
    peak: int
    width: int = WIDTH
    height: int = HEIGHT


def _day(at: float) -> str:
    return time.strftime("%Y-%m-%d", time.localtime(at))


def days_back(now: float, days: int = DAYS) -> list[str]:
    """The last ``days`` local dates, oldest first (today last)."""
    found: list[str] = []
    at = now
    while len(found) < days:
        day = _day(at)
        if not found or found[0] != day:
            found.insert(0, day)
        at -= 3600  # hour steps: exact across DST changes
    return found


def durations_per_day(tasks: Sequence[TaskRecord], days: Sequence[str]) -> dict[str, list[float]]:
    """Seconds each finished task's agent ran, by the day it finished."""
    per_day: dict[str, list[float]] = {day: [] for day in days}
    for task in tasks:
        if task.started_at is None or task.completed_at is None:
            continue
        day = _day(task.completed_at)
        if day in per_day:
            per_day[day].append(max(0.0, task.completed_at - task.started_at))
    return per_day


def cost_per_day(tasks: Sequence[TaskRecord], days: Sequence[str]) -> dict[str, float]:
    per_day = dict.fromkeys(days, 0.0)
    for task in tasks:
        if task.cost_usd and task.completed_at is not None:
            day = _day(task.completed_at)
            if day in per_day:
                per_day[day] += task.cost_usd
    return per_day


def queue_depth(
    tasks: Sequence[TaskRecord], now: float, hours: int = QUEUE_HOURS, step_s: int = QUEUE_STEP_S
) -> list[tuple[float, int]]:
    """(moment, tasks waiting then) every ``step_s`` over the last ``hours``, oldest first."""
    spans = [
        (task.created_at, task.started_at or task.completed_at or float("inf")) for task in tasks
    ]
    first = now - hours * 3600
    moments = [first + n * step_s for n in range(hours * 3600 // step_s + 1)]
    return [(at, sum(1 for start, end in spans if start <= at < end)) for at in moments]


def bar_chart(title: str, values: dict[str, float], describe: str) -> BarChart:
    """One bar per key (in order); ``describe`` formats a value, e.g. "{:.2f} s"."""
    top = max(values.values(), default=0.0) or 1.0
    plot_w = WIDTH - MARGIN_LEFT - 8
    plot_h = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    slot = plot_w / max(1, len(values))
    bars = []
    for n, (key, value) in enumerate(values.items()):
        height = plot_h * value / top
        bars.append(
            Bar(
                x=round(MARGIN_LEFT + n * slot + slot * 0.15, 1),
                y=round(MARGIN_TOP + plot_h - height, 1),
                width=round(slot * 0.7, 1),
                height=round(height, 1),
                label=key[5:],
                title=f"{key}: {describe.format(value)}",
            )
        )
    return BarChart(title, tuple(bars), describe.format(top))


def line_chart(title: str, samples: Sequence[tuple[float, int]]) -> LineChart:
    peak = max((count for _, count in samples), default=0)
    top = max(1, peak)
    plot_w = WIDTH - MARGIN_LEFT - 8
    plot_h = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    last = max(1, len(samples) - 1)
    points = " ".join(
        f"{MARGIN_LEFT + plot_w * n / last:.1f},{MARGIN_TOP + plot_h - plot_h * count / top:.1f}"
        for n, (_, count) in enumerate(samples)
    )
    clock = "%H:%M"
    return LineChart(
        title,
        points,
        str(top),
        time.strftime(clock, time.localtime(samples[0][0])) if samples else "",
        time.strftime(clock, time.localtime(samples[-1][0])) if samples else "",
        peak,
    )


def charts(tasks: Sequence[TaskRecord], now: float) -> tuple[BarChart, BarChart, LineChart]:
    days = days_back(now)
    durations = durations_per_day(tasks, days)
    median = {day: statistics.median(d) if d else 0.0 for day, d in durations.items()}
    return (
        bar_chart("Median task duration per day (seconds)", median, "{:.1f} s"),
        bar_chart("Cost per day (USD)", cost_per_day(tasks, days), "${:.4f}"),
        line_chart(
            f"Tasks waiting, last {QUEUE_HOURS} hours (every {QUEUE_STEP_S // 60} minutes)",
            queue_depth(tasks, now),
        ),
    )
