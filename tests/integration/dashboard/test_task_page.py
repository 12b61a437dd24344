"""A task's page as a waterfall (issue 32): every step with its start and duration, the
slowest named; ``/metrics``' step histogram counts the same steps. The real core, store
and dashboard over HTTP (``test_dashboard_pages.serve``); the event log holds Claude Code's
stream lines dated as the daemon dates them, the network log the egress proxy's lines."""

from __future__ import annotations

import datetime
import html
import json
import math
import re
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway_bot.agents.event_log import READY_MARKER, TIME_MARKER
from gateway_bot.config.dashboard import DashboardSettings
from tests.integration.dashboard.test_dashboard_pages import PagesDashboard, serve
from tests.integration.dashboard.test_dashboard_security import TOKEN


@pytest.fixture
async def dashboard(tmp_path: Path) -> AsyncIterator[PagesDashboard]:
    async with serve(tmp_path, DashboardSettings(token=TOKEN)) as made:
        yield made


def _assistant(block: dict[str, object]) -> str:
    return json.dumps({"type": "assistant", "message": {"content": [block]}})


def _stream(tool_command: str) -> list[str]:
    """One run of Claude Code's stream-json: a model call that asks for Bash, its result,
    a second model call that answers, the result line."""
    bash = {"type": "tool_use", "id": "u1", "name": "Bash", "input": {"command": tool_command}}
    result = {"type": "tool_result", "tool_use_id": "u1", "content": "ok"}
    done = {"type": "result", "subtype": "success", "is_error": False, "result": "Built."}
    return [
        json.dumps({"type": "system", "subtype": "init", "session_id": "s1", "model": "m"}),
        _assistant(bash),
        json.dumps({"type": "user", "message": {"content": [result]}}),
        _assistant({"type": "text", "text": "Built."}),
        json.dumps({**done, "session_id": "s1", "total_cost_usd": 0.01, "num_turns": 2}),
    ]


async def test_the_task_page_shows_each_step_with_its_duration_and_metrics_agree(
    dashboard: PagesDashboard,
) -> None:
    world = dashboard.world
    job = await world.say("run the build")
    await world.reply(job)
    await world.completed(job)
    task = await world.task(job)
    assert task.conversation_id is not None
    assert task.started_at is not None
    assert task.completed_at is not None
    # Dated inside the real run: the Bash call takes most of it.
    run = task.completed_at - task.started_at
    offsets = [0.05, 0.15, 0.85, 0.9, 0.95]
    # The daemon's ready line first (the sandbox had the CLI's process up), then the CLI's.
    lines = [json.dumps({"type": READY_MARKER, "at": task.started_at + 0.02 * run})]
    for offset, line in zip(offsets, _stream("make build"), strict=True):
        lines.append(json.dumps({"type": TIME_MARKER, "at": task.started_at + offset * run}))
        lines.append(line)
    root = dashboard.conversation_dir(task.conversation_id)
    (root / "events.jsonl").write_text("\n".join(lines) + "\n")
    # The proxy writes milliseconds: rounded up, within a millisecond of the run (a short run
    # on a fast machine may end before it; the trace allows the log its precision).
    at = math.ceil((task.started_at + 0.5 * run) * 1000) / 1000
    asked = datetime.datetime.fromtimestamp(at, datetime.UTC)
    request = {"time": asked.isoformat(timespec="milliseconds"), "method": "GET"}
    request |= {"url": "https://pypi.org/simple/", "allowed": True}
    (root / "network.log").write_text(json.dumps(request) + "\n")

    await dashboard.log_in()
    tasks = await (await dashboard.get("/tasks")).text()
    assert f'href="/tasks/{task.id}"' in tasks, "the list links each task's page"
    response = await dashboard.get(f"/tasks/{task.id}")
    assert response.status == 200
    page = await response.text()
    rows = re.findall(r'<tr class="(\w+)( slowest)?">(.*?)</tr>', page, re.S)
    kinds = [kind for kind, _, _ in rows]
    # In start order (the request's place among the agent's steps is the clock's).
    assert [kind for kind in kinds if kind != "network"] == [
        "stored", "queued", "acknowledged", "run", "container", "start",
        "model", "tool", "model", "reply",
    ]  # fmt: skip
    assert kinds.count("network") == 1, kinds
    cells = {kind: re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for kind, _, row in rows}
    bash = cells["tool"]
    assert bash[0] == "Bash: make build" or bash[0].startswith("Bash: make build <strong")
    assert re.fullmatch(r'<time title="[^"]+">\+\d+(\.\d)?s</time>', bash[2]), bash[2]
    assert re.fullmatch(r"\d+(\.\d)?s|\d+m\d\ds", bash[3]), bash[3]
    # One step, not the enclosing run, is the slowest, in words as well as its row's class.
    slowest = [(kind, row) for kind, mark, row in rows if mark]
    assert len(slowest) == 1, rows
    assert slowest[0][0] != "run"
    assert '<strong class="mark">slowest</strong>' in slowest[0][1]
    assert "Slowest step: <strong>" in page
    assert html.escape("GET https://pypi.org/simple/") in cells["network"][0]
    assert cells["network"][5] == "allowed"
    assert re.search(r'<rect x="[\d.]+" y="1" width="[\d.]+" height="8">', page)

    missing = await dashboard.get("/tasks/nosuchtask")
    assert missing.status == 404

    metrics = await (await dashboard.get("/metrics")).text()
    counted = Counter[str]()
    for family in text_string_to_metric_families(metrics):
        if family.name == "gateway_bot_task_step_seconds":
            for sample in family.samples:
                if sample.name.endswith("_count") and sample.value:
                    counted[sample.labels["step"]] = int(sample.value)
    # The earlier tasks of the world (none here) would count too: only this one finished.
    assert counted == Counter(kinds), metrics
    # A second scrape counts nothing twice.
    again = await (await dashboard.get("/metrics")).text()
    assert 'gateway_bot_task_step_seconds_count{step="tool"} 1.0' in again
