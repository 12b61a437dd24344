"""Chat commands are not agent tasks: a person schedules something and takes it back, then
asks the agent one thing; the operator's lists, charts and metrics show one task (and the
two commands apart from it), never three, nor a 0-second "run" in the duration figures.

The real `gateway-bot run` (console channel, dashboard on), the real claude CLI against the
fake model API; the operator reads `gateway-bot status`, `/metrics` and the dashboard."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

from aiohttp import ClientSession, CookieJar

from tests.conftest import write_config
from tests.integration.cli.test_status_command import status, wait_for_status
from tests.integration.dashboard.test_dashboard_metrics import METRICS_TOKEN, fetch, metric
from tests.integration.dashboard.test_dashboard_run import dashboard_url
from tests.support.fake_anthropic import FakeAnthropic

TOKEN = "a-dashboard-token-for-commands"


async def test_commands_are_counted_apart_from_the_agents_tasks(
    gateway: Any, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic
) -> None:
    config = write_config(
        tmp_path,
        target_repo,
        fake_api,
        dashboard={"port": 0, "token": TOKEN, "metrics_token": METRICS_TOKEN},
    )
    daemon = gateway("run", "--config", str(config))
    base = dashboard_url(daemon)
    daemon.send("/schedule in 2 hours check the build")
    daemon.expect(r"Scheduled #1")
    daemon.send("/unschedule 1")
    daemon.expect(r"Removed schedule #1")
    daemon.send("count the files")
    daemon.expect(r"Echo: count the files")

    # `gateway-bot status`: the one task under "Recently finished", the commands apart.
    shown = await asyncio.to_thread(
        wait_for_status,
        config,
        lambda s: len(s.get("commands", [])) == 2 and bool(s["tasks"]["finished"]),
        "the task and the two commands",
    )
    [task] = shown["tasks"]["finished"]
    assert (task["preview"], task["outcome"]) == ("count the files", "success")
    assert [c["preview"] for c in shown["commands"]] == [
        "/unschedule 1",
        "/schedule in 2 hours check the build",
    ]
    table = (await asyncio.to_thread(status, config)).stdout
    finished = table.split("Recently finished", 1)[1].split("\n\n", 1)[0]
    assert "count the files" in finished, table
    assert "/schedule" not in finished, table
    assert "Recent commands (2)" in table

    # /metrics: one task ran the agent, and it alone is timed.
    deadline = time.monotonic() + 30  # the task completes just after its reply is shown
    while True:
        status_code, text = await fetch(base + "metrics")
        assert status_code == 200
        if 'gateway_bot_tasks{reason="success",state="completed"}' in text:
            break
        assert time.monotonic() < deadline, text
        await asyncio.sleep(0.1)
    assert metric(text, "gateway_bot_tasks", state="completed", reason="success") == 1.0
    assert metric(text, "gateway_bot_task_duration_seconds_count", reason="success") == 1.0
    assert metric(text, "gateway_bot_commands", reason="success") == 2.0

    # The dashboard: the tasks page lists the task only, the charts count it only.
    async with ClientSession(cookie_jar=CookieJar(unsafe=True)) as browser:
        login = await browser.post(base + "login", data={"token": TOKEN})
        assert login.status == 200
        page = await login.text()
        rows = re.findall(r'data-task="([0-9a-f]{12})"', page)
        assert rows == [task["id"]], page
        assert "check the build" not in page
        charts = await (await browser.get(base + "charts")).text()
        assert "From the 1 newest tasks" in charts, charts
