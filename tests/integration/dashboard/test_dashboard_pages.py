"""The conversation page's container and network log, and the charts, in-process: the real
core (service, scheduler, store) with the fast tier's fake channel and agent, a sandbox that
lists what the test says, served by the real dashboard app over real HTTP.

The network log is written by the egress proxy about requests the agent chose, so two of
these tests are attacks: markup in a request's URL must render as text, and a link planted
where the log should be must not be followed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from gateway_bot.agents.claude.stream import parse_stream_line
from gateway_bot.config.dashboard import DashboardSettings
from gateway_bot.core.application import Application
from gateway_bot.core.feed import ChangeFeed
from gateway_bot.core.live_state import DaemonLiveState
from gateway_bot.core.workspaces.directories import Workspaces
from gateway_bot.dashboard import charts
from gateway_bot.dashboard.server import build_app
from gateway_bot.dashboard.sessions import load_or_make_key
from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from gateway_bot.domain.messages import RawMessage
from gateway_bot.domain.records import TaskRecord
from gateway_bot.sandbox.base import SandboxContainer
from gateway_bot.sandbox.host import HostSandbox
from tests.core.conftest import World
from tests.integration.dashboard.test_dashboard_run import next_event
from tests.integration.dashboard.test_dashboard_security import TOKEN, Dashboard

EVIL_URL = 'http://evil.example/<script>alert("net")</script>"><img src=x onerror=alert(2)>'
EVIL_LINE = "<svg onload=alert(3)>not json"


class MeasuredSandbox:
    """Lists the containers the test puts here and says each running one uses 50 MiB."""

    def __init__(self) -> None:
        self.containers: list[SandboxContainer] = []

    async def list_containers(self) -> list[SandboxContainer]:
        return list(self.containers)

    async def container_memory(self, name: str) -> int | None:
        running = any(c.name == name and c.state == "running" for c in self.containers)
        return 50 * 1024 * 1024 if running else None


class PagesDashboard(Dashboard):
    sandbox: MeasuredSandbox
    root: Path

    def conversation_dir(self, conversation_id: str) -> Path:
        path = self.root / "conversations" / conversation_id
        path.mkdir(parents=True, exist_ok=True)
        return path


@pytest.fixture
async def dashboard(tmp_path: Path) -> AsyncIterator[PagesDashboard]:
    async with serve(tmp_path, DashboardSettings(token=TOKEN, operator={"fake": "owner"})) as made:
        yield made


@contextlib.asynccontextmanager
async def serve(tmp_path: Path, settings: DashboardSettings) -> AsyncIterator[PagesDashboard]:
    world = World(tmp_path)
    feed = ChangeFeed()
    world.store.on_transition(feed.publish_transition)
    await world.start()
    assert world.service is not None
    sandbox = MeasuredSandbox()
    application = Application(
        world.store,
        DaemonLiveState({world.channel.name: world.channel}, sandbox),  # type: ignore[arg-type]
        service=world.service,
        conversation_root=lambda conversation_id: tmp_path / "conversations" / conversation_id,
        context_files=lambda conversation_id: HostSandbox().files(
            Workspaces(tmp_path, "unused", None).execution_context(conversation_id)
        ),
        parse_line=parse_stream_line,
    )
    key = load_or_make_key(tmp_path / "dashboard")
    server = TestServer(build_app(application, feed, settings, key, database=world.store.database))
    await server.start_server()
    made = PagesDashboard(world, server, key)
    made.sandbox, made.root = sandbox, tmp_path
    yield made
    await made.client.close()
    await server.close()
    feed.close()
    await world.close()


async def test_behind_a_proxy_a_forwarded_loopback_address_still_needs_the_login(
    tmp_path: Path,
) -> None:
    """``behind_proxy`` marks the cookie Secure; it makes no client address trusted."""
    settings = DashboardSettings(token=TOKEN, behind_proxy=True, host="0.0.0.0")
    async with serve(tmp_path, settings) as dashboard:
        for header in ("X-Forwarded-For", "X-Real-IP", "Forwarded"):
            value = "for=127.0.0.1" if header == "Forwarded" else "127.0.0.1"
            page = await dashboard.get("/tasks", headers={header: value})
            assert (page.status, page.headers.get("Location")) == (302, "/login"), header
            events = await dashboard.get("/events", headers={header: value})
            assert events.status == 401, header
        login = await dashboard.post("/login", {"token": TOKEN})
        assert "Secure" in login.headers["Set-Cookie"]


async def test_a_change_before_the_live_stream_connects_still_reaches_the_page(
    dashboard: PagesDashboard,
) -> None:
    """The page is rendered, the task completes, then the browser opens the stream: the
    stream's first table already shows the completion (no later change would bring it)."""
    world = dashboard.world
    held = await world.say("hold:job a job")
    await world.until(lambda: world.agent.running, "the task to run")
    task_id = await world.task_id(held)
    await dashboard.log_in()
    page = await (await dashboard.get("/tasks")).text()
    assert re.search(rf'data-task="{task_id}">.*?<td class="state">executing</td>', page, re.S)
    world.agent.release("job")
    await world.completed(held)
    async with dashboard.client.get(dashboard.url("/events")) as stream:
        assert await next_event(stream) == ("hello", "Live.")
        kind, rows = await asyncio.wait_for(next_event(stream), 60)  # none: the bug
    assert kind == "tasks"
    assert re.search(rf'data-task="{task_id}">.*?<td class="state">success</td>', rows, re.S)


async def a_conversation(dashboard: PagesDashboard) -> str:
    world = dashboard.world
    await world.reply(await world.say("hello"))
    conversation_id = (await world.task("m1")).conversation_id
    assert conversation_id is not None
    return conversation_id


async def test_the_network_log_shows_allowed_and_blocked_requests_as_text(
    dashboard: PagesDashboard,
) -> None:
    conversation_id = await a_conversation(dashboard)
    at = "2026-11-26T01:00:00.000+00:00"
    lines = [
        {"time": at, "method": "GET", "url": "https://pypi.org/simple/", "allowed": True},
        {
            "time": at,
            "method": "POST",
            "url": EVIL_URL,
            "allowed": False,
            "reason": "host evil.example is not allowed <b>bold</b>",
        },
    ]
    text = "\n".join(json.dumps(line) for line in lines) + "\n" + EVIL_LINE + "\n"
    (dashboard.conversation_dir(conversation_id) / "network.log").write_text(text)
    await dashboard.log_in()
    response = await dashboard.get(f"/conversations/{conversation_id}")
    assert response.status == 200
    page = await response.text()
    network = page[page.index("<h2>Network</h2>") :]
    assert re.search(r'<tr class="allowed">.*?allowed.*?GET.*?https://pypi\.org/simple/', network)
    assert re.search(r'<tr class="blocked">.*?blocked.*?POST', network, re.S)
    # Times read as the rest of the page writes them (local time, to the second), not as
    # the proxy's ISO text.
    shown = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(1795654800))  # `at`
    assert f"<time>{shown}</time>" in network, network[:600]
    assert at not in network
    # The attacker's markup is text: escaped, never a tag the browser would run.
    assert "<script>alert" not in page
    assert "<img src=x" not in page
    assert "<svg onload" not in page
    assert "<b>bold</b>" not in page
    assert "&lt;script&gt;alert(&#34;net&#34;)&lt;/script&gt;" in page
    assert "&lt;svg onload=alert(3)&gt;not json" in page, "a line that is no request, as text"
    assert "&lt;b&gt;bold&lt;/b&gt;" in page


async def test_a_link_planted_for_the_network_log_is_not_followed(
    dashboard: PagesDashboard, tmp_path: Path
) -> None:
    """The proxy writes its logs directory: a link there (or a relative one where the
    sandbox's link should be) must not make the dashboard read a host file."""
    conversation_id = await a_conversation(dashboard)
    secret = tmp_path / "host-secret.txt"
    secret.write_text(json.dumps({"url": "HOST-SECRET", "allowed": True}) + "\n")
    logs = tmp_path / "egress-logs"
    logs.mkdir()
    proxy_log = logs / f"{conversation_id}.log"
    proxy_log.symlink_to(secret)  # what a compromised proxy could do
    link = dashboard.conversation_dir(conversation_id) / "network.log"
    link.symlink_to(proxy_log)  # the sandbox's own link, absolute, to the proxy's log
    await dashboard.log_in()
    page = await (await dashboard.get(f"/conversations/{conversation_id}")).text()
    assert "HOST-SECRET" not in page
    assert "link where a file should be" in page
    link.unlink()
    link.symlink_to(Path("..", "..", secret.name))
    page = await (await dashboard.get(f"/conversations/{conversation_id}")).text()
    assert "HOST-SECRET" not in page
    assert "link where a file should be" in page
    # The sandbox's link to a real log file is read.
    link.unlink()
    proxy_log.unlink()
    proxy_log.write_text(
        json.dumps({"method": "GET", "url": "https://ok.example/", "allowed": True})
    )
    link.symlink_to(proxy_log)
    page = await (await dashboard.get(f"/conversations/{conversation_id}")).text()
    assert "https://ok.example/" in page


async def test_the_container_is_running_idle_or_stopped_with_its_age_and_memory(
    dashboard: PagesDashboard,
) -> None:
    world = dashboard.world
    held = await world.say("hold:job a long job")
    await world.until(lambda: world.agent.running, "the task to run")
    conversation_id = (await world.task(held)).conversation_id
    assert conversation_id is not None
    name = f"gwb-agent-{conversation_id}"
    made = time.time() - 2 * 3600 - 5 * 60
    dashboard.sandbox.containers = [SandboxContainer(name, conversation_id, "running", made)]
    await dashboard.log_in()

    async def container_line() -> str:
        page = await (await dashboard.get(f"/conversations/{conversation_id}")).text()
        found = re.search(r'<li class="container">(.*?)</li>', page, re.S)
        assert found, page
        return " ".join(found.group(1).split())

    line = await container_line()
    assert '<strong class="container-status">running</strong>' in line
    assert "made 2h05m ago" in line
    assert "memory 50.0 MiB" in line
    world.agent.release("job")
    await world.completed(held)
    line = await container_line()
    assert '<strong class="container-status">idle</strong>' in line
    assert "memory 50.0 MiB" in line
    dashboard.sandbox.containers = [SandboxContainer(name, conversation_id, "exited", made)]
    line = await container_line()
    assert '<strong class="container-status">stopped</strong> (exited)' in line
    assert "memory" not in line


async def test_the_charts_page_has_durations_cost_and_the_queue(
    dashboard: PagesDashboard,
) -> None:
    world = dashboard.world
    await world.reply(await world.say("done already"))
    await world.say("hold:job running", room="a")
    await world.until(lambda: world.agent.running, "the task to run")
    await world.say("waits one", room="a")
    await world.say("waits two", room="a")
    await dashboard.log_in()
    response = await dashboard.get("/charts")
    assert response.status == 200
    page = await response.text()
    assert page.count("<canvas ") == 7
    assert "Task duration per day (median and 95th percentile)" in page
    assert "Cost per day" in page
    assert "Tasks waiting to start every 10 minutes over the last 24 hours: at most 2." in page, (
        "two messages wait behind the running one"
    )
    today = time.strftime("%a %d %b")
    assert re.search(rf'<th scope="row">{today}</th><td>[0-9.]+ s</td>', page)
    world.agent.release("job")
    await world.idle()


def record(
    created: float, started: float | None, completed: float | None, cost: float
) -> TaskRecord:
    return TaskRecord(
        id="t",
        channel="fake",
        message_id="m",
        conversation_id="c",
        state=TaskState.COMPLETED if completed else TaskState.PENDING,
        completion_reason=CompletionReason.SUCCESS if completed else None,
        raw=RawMessage("fake", "m", "alice", {}, created),
        parsed=None,
        reply=None,
        reply_delivered=False,
        created_at=created,
        started_at=started,
        completed_at=completed,
        cost_usd=cost,
        num_turns=1,
        error=None,
        attempts=1,
    )


def test_queue_depth_and_daily_figures_come_from_the_task_rows() -> None:
    now = time.time()
    tasks = [
        record(now - 3000, now - 2900, now - 2800, 0.25),  # waited 100 s, ran 100 s
        record(now - 3000, now - 2700, now - 2400, 0.50),  # waited 300 s, ran 300 s
        record(now - 1000, None, now - 500, 0.0),  # refused after 500 s, never ran
        record(now - 100, None, None, 0.0),  # waiting now
    ]
    depth = dict(charts.queue_depth(tasks, now, hours=1, step_s=60))
    assert depth[now] == 1
    assert depth[now - 3000] == 2
    assert depth[now - 2760] == 1
    assert depth[now - 600] == 1
    assert depth[now - 1200] == 0
    days = charts.days_back(now, 2)
    today = time.strftime("%Y-%m-%d", time.localtime(now - 2400))
    assert sorted(charts.durations_per_day(tasks, days)[today]) == pytest.approx([100, 300])
    assert charts.cost_per_day(tasks, days)[today] == pytest.approx(0.75)
