"""The charts page's numbers (``dashboard/charts.py``), from task rows made here: what each
chart says for a known week, so a wrong count, rate or percentile fails here and not only
as a wrong-looking bar."""

from __future__ import annotations

import json
import time

import pytest

from gateway_bot.dashboard import charts
from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from gateway_bot.domain.messages import InboundMessage, RawMessage
from gateway_bot.domain.records import TaskRecord

NOW = time.mktime((2026, 11, 28, 15, 0, 0, 0, 0, -1))
DAY = 86400


def task(
    ended_days_ago: float | None,
    reason: CompletionReason = CompletionReason.SUCCESS,
    *,
    ran_s: float | None = 60.0,
    waited_s: float = 10.0,
    cost: float = 0.0,
    sender: str = "alice",
    key: str = "room-a",
    channel: str = "slack",
) -> TaskRecord:
    ended = None if ended_days_ago is None else NOW - ended_days_ago * DAY
    if ended is None:
        created, started = NOW - waited_s, None
    else:
        started = None if ran_s is None else ended - ran_s
        created = (started if started is not None else ended) - waited_s
    parsed = InboundMessage(channel, "m", sender.lower(), sender, "hello", key, created)
    return TaskRecord(
        id="t",
        channel=channel,
        message_id="m",
        conversation_id="c-" + key,
        state=TaskState.COMPLETED if ended is not None else TaskState.PENDING,
        completion_reason=reason if ended is not None else None,
        raw=RawMessage(channel, "m", sender.lower(), {}, created),
        parsed=parsed,
        reply=None,
        reply_delivered=False,
        created_at=created,
        started_at=started,
        completed_at=ended,
        cost_usd=cost,
        num_turns=1,
        error=None,
        attempts=1,
    )


def test_outcomes_failure_rate_and_percentiles_per_day() -> None:
    tasks = [
        *(task(0, ran_s=s) for s in (10, 20, 30, 40, 100)),  # today: five succeeded
        task(0, CompletionReason.EXECUTION_FAILED),
        task(0, CompletionReason.TIMEOUT),
        task(0, CompletionReason.CANCELLED),  # stopped: not a failure of the agent
        task(0, CompletionReason.REJECTED, ran_s=None),  # refused, never ran
        task(1, CompletionReason.INTERNAL_ERROR),  # yesterday: one run, failed
        task(None, waited_s=30),  # waiting now
    ]
    days = charts.days_back(NOW, 3)
    counts = charts.outcomes_per_day(tasks, days)
    assert counts == {
        "succeeded": [0, 0, 5],
        "failed": [0, 1, 2],
        "stopped": [0, 0, 1],
        "refused": [0, 0, 1],
    }
    assert charts.failure_rate(counts) == [None, 100.0, pytest.approx(28.6)]
    today = charts.durations_per_day(tasks, days)[days[-1]]
    assert sorted(today) == [10, 20, 30, 40, 60, 60, 60, 100]
    assert charts.percentile(today, 50) == 50.0
    assert charts.percentile(today, 95) == pytest.approx(86.0)
    assert charts.percentile([], 50) is None
    assert charts.percentile([7.0], 95) == 7.0


def test_cost_by_day_conversation_and_sender_keeps_the_costliest_and_sums_the_rest() -> None:
    tasks = [
        task(0, cost=1.0, sender="alice", key="room-a"),
        task(0, cost=0.5, sender="bob", key="room-b"),
        task(2, cost=2.0, sender="alice", key="room-a"),
        task(2, cost=0.25, sender="carol", key="room-c", channel="email"),
        task(0, cost=0.0, sender="dave", key="room-d"),  # free: not listed
    ]
    days = charts.days_back(NOW, 3)
    assert list(charts.cost_per_day(tasks, days).values()) == [2.25, 0.0, 1.5]
    assert charts.top_costs([("a", 3.0), ("b", 1.0), ("c", 0.5), ("d", 0.0)], top=2) == [
        ("a", 3.0),
        ("b", 1.0),
        ("others", 0.5),
    ]
    page = charts.build(tasks, NOW)
    by_name = {chart.id: chart for chart in page.charts}
    assert by_name["cost-sender"].labels == ("alice (slack)", "bob (slack)", "carol (email)")
    assert by_name["cost-sender"].series[0].values == (3.0, 0.5, 0.25)
    assert by_name["cost-conversation"].labels[0] == "slack · room-a"
    assert by_name["cost"].rows()[-1][1] == ["$1.50"]


def test_the_page_covers_the_days_the_store_holds_and_carries_every_chart_as_json() -> None:
    week = [task(d, cost=0.1) for d in range(0, 10)]  # ten days of one task each
    page = charts.build(week, NOW)
    outcomes = page.charts[0]
    assert len(outcomes.labels) == 10
    assert outcomes.labels[-1] == time.strftime("%a %d %b", time.localtime(NOW))
    assert charts.build([], NOW).charts[0].labels.__len__() == charts.MIN_DAYS
    old = [task(d) for d in (0, 90)]
    assert len(charts.build(old, NOW).charts[0].labels) == charts.MAX_DAYS
    data = json.loads(page.data)
    assert [c["id"] for c in data] == [
        "outcomes",
        "failure-rate",
        "durations",
        "cost",
        "cost-conversation",
        "cost-sender",
        "queue",
    ]
    assert data[0]["stacked"] is True
    assert ("10", "tasks") in page.totals
    assert "10 succeeded" in outcomes.summary


def test_queue_depth_counts_tasks_accepted_and_not_yet_started() -> None:
    tasks = [
        task(0, waited_s=1800),  # ended now after waiting half an hour, then a minute's run
        task(None, waited_s=900),  # waiting for a quarter of an hour, still
    ]
    depth = dict(charts.queue_depth(tasks, NOW, hours=1, step_s=300))
    assert depth[NOW] == 1
    assert depth[NOW - 600] == 2
    assert depth[NOW - 1200] == 1
    assert depth[NOW - 2400] == 0
