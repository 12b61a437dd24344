"""The charts page's numbers: tasks per day by outcome, the failure rate, duration
percentiles and cost per day, cost by conversation and by sender, and the queue depth over
the last day. Computed here in plain Python from the agent tasks the store keeps, so the
numbers are tested without a browser; ``static/charts.js`` only draws them (Chart.js,
served by the daemon), and the page carries each chart's numbers as a table too, for a
screen reader and for anyone without scripts.

Everything comes from the task rows (commands, answered at once, are left out by the
query: a /help's zero seconds is no agent's run): ``created_at`` (accepted),
``started_at`` (its agent started), ``completed_at`` and how it ended. The queue depth at
a moment is the number of tasks accepted and not yet started then (waiting for their turn,
a slot, or an approval); a task that ended without starting (refused, denied) waited until
it ended. So no samples are recorded, and the charts cover what the store still holds
(``state.retention_days``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gateway_bot.core.application import Application
from gateway_bot.domain.lifecycle import CompletionReason
from gateway_bot.domain.records import TaskRecord

CHART_TASKS = 20_000
"""The charts are drawn from the newest this many tasks."""
MIN_DAYS = 7
MAX_DAYS = 30
QUEUE_HOURS = 24
QUEUE_STEP_S = 600
TOP = 8
"""Cost by conversation and by sender: the costliest this many, the rest as "others"."""

OUTCOMES = {
    CompletionReason.SUCCESS: "succeeded",
    CompletionReason.EXECUTION_FAILED: "failed",
    CompletionReason.TIMEOUT: "failed",
    CompletionReason.INTERNAL_ERROR: "failed",
    CompletionReason.CANCELLED: "stopped",
    CompletionReason.REJECTED: "refused",
    CompletionReason.UNAUTHORIZED: "refused",
    CompletionReason.AUTH_FAILED: "refused",
}
"""How a finished task ended, in the four words the charts use."""
OUTCOME_COLOURS = {"succeeded": "ok", "failed": "bad", "stopped": "warn", "refused": "muted"}

Value = float | None
"""None: nothing to show that day (a gap in a line, not a zero)."""


@dataclass(frozen=True)
class Series:
    label: str
    values: tuple[Value, ...]
    colour: str
    """A role charts.js maps to a colour of the current (light or dark) theme."""


@dataclass(frozen=True)
class Chart:
    id: str
    title: str
    kind: str
    """bar, line or hbar (horizontal bars, for names)."""
    unit: str
    """tasks, %, s or $: how a value is written on the axis, in tooltips and tables."""
    labels: tuple[str, ...]
    series: tuple[Series, ...]
    summary: str
    """One sentence a screen reader says for the drawing."""
    stacked: bool = False
    wide: bool = False

    def rows(self) -> list[tuple[str, list[str]]]:
        """The numbers as table rows: a label, then one cell per series."""
        return [
            (label, [show(s.values[n], self.unit) for s in self.series])
            for n, label in enumerate(self.labels)
        ]

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "kind": self.kind,
            "unit": self.unit,
            "stacked": self.stacked,
            "labels": list(self.labels),
            "series": [
                {"label": s.label, "values": list(s.values), "colour": s.colour}
                for s in self.series
            ],
        }


@dataclass(frozen=True)
class ChartsPage:
    task_count: int
    totals: tuple[tuple[str, str], ...]
    """(figure, what it is) for the line of totals above the charts."""
    charts: tuple[Chart, ...]

    @property
    def data(self) -> str:
        """Every chart's numbers as JSON, for the page's data attribute (escaped there)."""
        return json.dumps([chart.to_json() for chart in self.charts])


def show(value: Value, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "$":
        return f"${value:.2f}"
    if unit == "%":
        return f"{value:.1f} %"
    if unit == "s":
        return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"
    return f"{value:g}"


# -- the numbers ---------------------------------------------------------------------------


def _day(at: float) -> str:
    return time.strftime("%Y-%m-%d", time.localtime(at))


def days_back(now: float, days: int = MIN_DAYS) -> list[str]:
    """The last ``days`` local dates, oldest first (today last)."""
    found: list[str] = []
    at = now
    while len(found) < days:
        day = _day(at)
        if not found or found[0] != day:
            found.insert(0, day)
        at -= 3600  # hour steps: exact across DST changes
    return found


def days_shown(tasks: Sequence[TaskRecord], now: float) -> list[str]:
    """From the oldest task's day to today: at least ``MIN_DAYS``, at most ``MAX_DAYS``."""
    every = days_back(now, MAX_DAYS)
    first = _day(min((task.created_at for task in tasks), default=now))
    keep = len(every) - every.index(first) if first in every else MAX_DAYS
    return every[-max(MIN_DAYS, keep) :]


def outcome(task: TaskRecord) -> str | None:
    """succeeded, failed, stopped or refused; None while it has not ended."""
    if task.completed_at is None or task.completion_reason is None:
        return None
    return OUTCOMES[task.completion_reason]


def outcomes_per_day(tasks: Sequence[TaskRecord], days: Sequence[str]) -> dict[str, list[int]]:
    """For each outcome, how many tasks ended so on each day (by the day they ended)."""
    index = {day: n for n, day in enumerate(days)}
    counts = {name: [0] * len(days) for name in OUTCOME_COLOURS}
    for task in tasks:
        ended = outcome(task)
        if ended is not None and task.completed_at is not None:
            n = index.get(_day(task.completed_at))
            if n is not None:
                counts[ended][n] += 1
    return counts


def failure_rate(counts: dict[str, list[int]]) -> list[Value]:
    """Per day, the percentage of the tasks that ran to an end which failed: stopped and
    refused tasks are no failure of the agent's, and a day with no run has no rate."""
    rates: list[Value] = []
    for failed, succeeded in zip(counts["failed"], counts["succeeded"], strict=True):
        ran = failed + succeeded
        rates.append(round(100 * failed / ran, 1) if ran else None)
    return rates


def percentile(values: Sequence[float], q: float) -> Value:
    """The ``q`` (0-100) percentile, interpolated between the two nearest ranks."""
    if not values:
        return None
    ordered = sorted(values)
    at = (len(ordered) - 1) * q / 100
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


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


def _sender(task: TaskRecord) -> str:
    if task.parsed is not None:
        return f"{task.parsed.sender_name or task.parsed.sender_id} ({task.channel})"
    return f"{task.raw.sender} ({task.channel})"


def _conversation(task: TaskRecord) -> str:
    key = task.parsed.conversation_key if task.parsed is not None else ""
    return f"{task.channel} · {key or task.conversation_id or 'none'}"


def top_costs(pairs: Iterable[tuple[str, float]], top: int = TOP) -> list[tuple[str, float]]:
    """The ``top`` costliest names, costliest first, and the rest summed as "others"."""
    totals: dict[str, float] = {}
    for name, cost in pairs:
        if cost:
            totals[name] = totals.get(name, 0.0) + cost
    ranked = sorted(totals.items(), key=lambda item: (-item[1], item[0]))
    rest = sum(cost for _, cost in ranked[top:])
    return ranked[:top] + ([("others", rest)] if rest else [])


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


# -- the page --------------------------------------------------------------------------------


def _day_label(day: str) -> str:
    return time.strftime("%a %d %b", time.strptime(day, "%Y-%m-%d"))


def _peak(labels: Sequence[str], values: Sequence[Value], unit: str) -> str:
    known = [(v, label) for label, v in zip(labels, values, strict=True) if v is not None]
    if not known:
        return "no data"
    value, label = max(known)
    return f"highest {show(value, unit)} on {label}"


def build(tasks: Sequence[TaskRecord], now: float) -> ChartsPage:
    """Every chart of the page from ``tasks`` (any order) as of ``now``."""
    days = days_shown(tasks, now)
    labels = tuple(_day_label(day) for day in days)
    span = f"{labels[0]} to {labels[-1]}"
    counts = outcomes_per_day(tasks, days)
    rates = failure_rate(counts)
    durations = durations_per_day(tasks, days)
    p50 = [percentile(durations[day], 50) for day in days]
    p95 = [percentile(durations[day], 95) for day in days]
    costs = cost_per_day(tasks, days)
    shown = [t for t in tasks if t.completed_at is not None and _day(t.completed_at) in costs]
    by_conversation = top_costs((_conversation(t), t.cost_usd) for t in shown)
    by_sender = top_costs((_sender(t), t.cost_usd) for t in shown)
    queue = queue_depth(tasks, now)
    queue_labels = tuple(time.strftime("%H:%M", time.localtime(at)) for at, _ in queue)
    ended = {name: sum(values) for name, values in counts.items()}
    ran = ended["succeeded"] + ended["failed"]
    every = [d for day in days for d in durations[day]]
    total_cost = sum(costs.values())

    def hbar(id_: str, title: str, ranked: list[tuple[str, float]]) -> Chart:
        names = tuple(name for name, _ in ranked)
        first = f"{names[0]} spent most, {show(ranked[0][1], '$')}" if ranked else "no cost"
        return Chart(
            id_,
            title,
            "hbar",
            "$",
            names,
            (Series("Cost", tuple(cost for _, cost in ranked), "primary"),),
            f"{title}, {span}: {first}.",
        )

    charts = (
        Chart(
            "outcomes",
            "Tasks per day by outcome",
            "bar",
            "tasks",
            labels,
            tuple(
                Series(name, tuple(float(c) for c in counts[name]), colour)
                for name, colour in OUTCOME_COLOURS.items()
            ),
            f"Tasks that ended each day, {span}, stacked by outcome: "
            + ", ".join(f"{n} {name}" for name, n in ended.items())
            + ".",
            stacked=True,
            wide=True,
        ),
        Chart(
            "failure-rate",
            "Failure rate per day",
            "line",
            "%",
            labels,
            (Series("Failed", tuple(rates), "bad"),),
            f"Share of the tasks that ran which failed, {span}: {_peak(labels, rates, '%')}.",
        ),
        Chart(
            "durations",
            "Task duration per day (median and 95th percentile)",
            "line",
            "s",
            labels,
            (Series("p50", tuple(p50), "primary"), Series("p95", tuple(p95), "warn")),
            f"How long the agent ran, {span}: 95th percentile {_peak(labels, p95, 's')}.",
        ),
        Chart(
            "cost",
            "Cost per day",
            "bar",
            "$",
            labels,
            (Series("Cost", tuple(costs[day] for day in days), "primary"),),
            f"Cost per day, {span}: {show(total_cost, '$')} in all, "
            f"{_peak(labels, list(costs.values()), '$')}.",
        ),
        hbar("cost-conversation", "Cost by conversation", by_conversation),
        hbar("cost-sender", "Cost by sender", by_sender),
        Chart(
            "queue",
            f"Tasks waiting to start, last {QUEUE_HOURS} hours",
            "line",
            "tasks",
            queue_labels,
            (Series("Waiting", tuple(float(n) for _, n in queue), "warn"),),
            f"Tasks waiting to start every {QUEUE_STEP_S // 60} minutes over the last "
            f"{QUEUE_HOURS} hours: at most {max((n for _, n in queue), default=0)}.",
            wide=True,
        ),
    )
    totals = (
        (str(len(tasks)), "tasks"),
        (show(100 * ended["failed"] / ran if ran else None, "%"), "failed"),
        (show(percentile(every, 50), "s"), "median duration"),
        (show(total_cost, "$"), f"cost, {span}"),
    )
    return ChartsPage(len(tasks), totals, charts)


async def page(application: Application, now: float) -> ChartsPage:
    return build(await application.tasks(limit=CHART_TASKS), now)
