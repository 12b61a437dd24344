"""The dashboard of a real `gateway-bot run` (console channel; the real claude CLI against
the fake model API, held mid-request): an operator logs in with the token over HTTP, sees
the running task, stops it with its button, and the live stream and the page say it was
cancelled. The console user sees the same stop as after /stop."""

from __future__ import annotations

import re
import signal
import socket
import time
from pathlib import Path
from typing import Any

from aiohttp import ClientResponse, ClientSession, CookieJar

from tests.conftest import write_config
from tests.integration.dashboard.test_dashboard_security import FROM_THE_DASHBOARD
from tests.support.fake_anthropic import FakeAnthropic

TOKEN = "a-dashboard-token-for-tests"


def logged(daemon: Any, pattern: str, within_s: float = 60) -> re.Match[str]:
    """Wait for the daemon's log (stderr) to show ``pattern``."""
    deadline = time.monotonic() + within_s
    while True:
        found = re.search(pattern, daemon.stderr)
        if found:
            return found
        assert time.monotonic() < deadline, f"never logged {pattern!r}:\n{daemon.stderr}"
        assert daemon.process.poll() is None, daemon.stderr
        time.sleep(0.1)


def dashboard_url(daemon: Any) -> str:
    """The daemon logs where it serves the dashboard (port 0: a free one)."""
    return logged(daemon, r"dashboard at (http://127\.0\.0\.1:\d+/)").group(1)


async def next_event(stream: ClientResponse) -> tuple[str, str]:
    kind, data = "message", []
    while True:
        line = (await stream.content.readline()).decode().rstrip("\r\n")
        if line.startswith("event:"):
            kind = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data.append(line.removeprefix("data:").removeprefix(" "))
        elif line == "" and data:
            return kind, "\n".join(data)


async def test_an_operator_stops_a_running_task_from_the_dashboard(
    gateway: Any, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic
) -> None:
    config = write_config(tmp_path, target_repo, fake_api, dashboard={"port": 0, "token": TOKEN})
    fake_api.hold("DASHBOARD PROBE")
    daemon = gateway("run", "--config", str(config))
    base = dashboard_url(daemon)
    daemon.send("DASHBOARD PROBE: count the files")
    assert fake_api.wait_for_held(60), daemon.stderr

    async with ClientSession(
        cookie_jar=CookieJar(unsafe=True), headers=FROM_THE_DASHBOARD
    ) as browser:
        first = await browser.get(base + "tasks", allow_redirects=False)
        assert (first.status, first.headers["Location"]) == (302, "/login")
        login = await browser.post(base + "login", data={"token": TOKEN})
        assert login.status == 200
        assert str(login.url).endswith("/tasks")
        page = await login.text()
        [(task_id, state)] = re.findall(
            r'data-task="([0-9a-f]{12})">.*?<td class="state">(\w+)</td>', page, re.S
        )
        assert state == "executing"
        assert "DASHBOARD PROBE: count the files" in page
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf is not None

        async with browser.get(base + "events") as stream:
            assert stream.status == 200
            assert (await next_event(stream))[0] == "hello"
            stop = await browser.post(base + f"tasks/{task_id}/stop", data={"csrf": csrf.group(1)})
            assert stop.status == 200
            assert f"Stopping task {task_id}" in await stop.text()
            while True:
                kind, data = await next_event(stream)
                if kind == "change" and '"completion_reason": "cancelled"' in data:
                    assert task_id in data
                    break

        daemon.expect(r"^agent> Stopped\.")
        after = await (await browser.get(base + "tasks")).text()
        assert re.search(rf'data-task="{task_id}">.*?<td class="state">cancelled</td>', after, re.S)

        conversation = re.search(r'href="/conversations/([0-9a-f]{8})"', after)
        assert conversation is not None
        shown = await (await browser.get(base + f"conversations/{conversation.group(1)}")).text()
        assert f"Task <code>{task_id}</code>" in shown
        assert "accepted from console" in shown
        assert "completed: cancelled" in shown
        assert "No container" in shown, "sandbox none keeps no container"

        # A live stream left open does not hold the daemon's shutdown.
        async with browser.get(base + "events") as stream:
            assert (await next_event(stream))[0] == "hello"
            assert (await next_event(stream))[0] == "tasks", "the table as it is on connecting"
            fake_api.release()
            daemon.process.send_signal(signal.SIGTERM)
            assert await stream.content.read() == b"", "the stream ends with the daemon"
    assert daemon.wait() == 0, daemon.stderr


def test_a_taken_port_leaves_chat_working_and_says_why(
    gateway: Any, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_config(
            tmp_path, target_repo, fake_api, dashboard={"port": port, "token": TOKEN}
        )
        daemon = gateway("run", "--config", str(config))
        daemon.send("hello")
        daemon.expect(r"^agent> Echo: hello$")
        logged(daemon, rf"the dashboard is not served: .*{port}")
        daemon.process.send_signal(signal.SIGTERM)
        assert daemon.wait() == 0, daemon.stderr


async def test_the_acknowledgement_links_to_the_conversations_page(
    gateway: Any, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic
) -> None:
    """With ``dashboard.public_url`` set, "Working on it" ends with the conversation's page
    there, and that page (on the dashboard actually served) is the conversation of the
    message."""
    public = "https://bot.example.test/gw/"
    config = write_config(
        tmp_path,
        target_repo,
        fake_api,
        dashboard={"port": 0, "token": TOKEN, "public_url": public},
    )
    daemon = gateway("run", "--config", str(config))
    base = dashboard_url(daemon)
    daemon.send("hello there")
    ack = re.fullmatch(
        r"… Working on it… https://bot\.example\.test/gw/conversations/([0-9a-f]+) "
        r"\(task ([0-9a-f]{12})\)",
        daemon.expect(r"^… Working on it"),
    )
    assert ack is not None, daemon.lines
    daemon.expect(r"^agent> Echo: hello there$")
    conversation_id, task_id = ack.group(1), ack.group(2)
    async with ClientSession(
        cookie_jar=CookieJar(unsafe=True), headers=FROM_THE_DASHBOARD
    ) as browser:
        await browser.post(base + "login", data={"token": TOKEN})
        page = await browser.get(base + f"conversations/{conversation_id}")
        assert page.status == 200
        assert f"Task <code>{task_id}</code>" in await page.text()
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr
