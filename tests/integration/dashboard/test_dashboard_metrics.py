"""``/metrics``: who may read it, and that it tells the truth about a real daemon.

The access tests serve the real dashboard app on all addresses (in-process, the fast tier's
core) and connect once over loopback and once over this machine's own non-loopback address,
so the server sees a real non-loopback socket peer. The truth test runs `gateway-bot run`
(console channel, the real claude CLI against the fake model API) and scrapes it."""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from gateway_bot.config.dashboard import DashboardSettings
from gateway_bot.core.application import Application
from gateway_bot.core.feed import ChangeFeed
from gateway_bot.core.live_state import DaemonLiveState
from gateway_bot.dashboard.metrics import TaskDurations, metrics_readable
from gateway_bot.dashboard.server import build_app
from gateway_bot.dashboard.sessions import load_or_make_key
from gateway_bot.sandbox.base import SandboxContainer
from tests.conftest import write_config
from tests.core.conftest import World
from tests.integration.dashboard.test_dashboard_run import dashboard_url
from tests.integration.dashboard.test_dashboard_security import FROM_THE_DASHBOARD
from tests.support.fake_anthropic import FakeAnthropic

TOKEN = "correct-horse-battery-staple"
METRICS_TOKEN = "a-scrapers-own-token-0123"


class TwoContainers:
    async def list_containers(self) -> list[SandboxContainer]:
        return [
            SandboxContainer("gwb-a", "aaaa1111", "running"),
            SandboxContainer("gwb-b", "bbbb2222", "exited"),
        ]


@dataclass
class Served:
    world: World
    server: TestServer

    def url(self, host: str, path: str = "/metrics") -> str:
        return f"http://{host}:{self.server.port}{path}"


async def serve(tmp_path: Path, **settings: Any) -> Served:
    world = World(tmp_path)
    feed = ChangeFeed()
    await world.start()
    assert world.service is not None
    application = Application(
        world.store,
        DaemonLiveState({world.channel.name: world.channel}, TwoContainers()),  # type: ignore[arg-type]
        service=world.service,
    )
    dashboard = DashboardSettings(token=TOKEN, operator={"fake": "owner"}, **settings)
    key = load_or_make_key(tmp_path / "dashboard")
    app = build_app(
        application, feed, dashboard, key, TaskDurations(), database=world.store.database
    )
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return Served(world, server)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    made = await serve(tmp_path, metrics_token=METRICS_TOKEN)
    yield made
    await made.server.close()
    await made.world.close()


@pytest.fixture
async def proxied(tmp_path: Path) -> AsyncIterator[Served]:
    made = await serve(tmp_path, metrics_token=METRICS_TOKEN, behind_proxy=True)
    yield made
    await made.server.close()
    await made.world.close()


async def fetch(url: str, **headers: str) -> tuple[int, str]:
    async with ClientSession() as client, client.get(url, headers=headers) as response:
        return response.status, await response.text()


async def test_a_loopback_scraper_reads_them_without_a_login(served: Served) -> None:
    await served.world.say("hello")
    await served.world.idle()
    status, text = await fetch(served.url("127.0.0.1"))
    assert status == 200
    assert 'gateway_bot_tasks{reason="success",state="completed"} 1.0' in text
    assert "gateway_bot_queue_depth 0.0" in text
    assert 'gateway_bot_containers{state="running"} 1.0' in text
    assert 'gateway_bot_channel_up{channel="fake"}' in text


async def test_a_rebound_web_page_on_loopback_does_not_read_them(served: Served) -> None:
    """The attack: a page at evil.example rebinds its name to 127.0.0.1, so the operator's
    browser connects over loopback, but the request says ``Host: evil.example``."""
    status, text = await fetch(served.url("127.0.0.1"), Host="evil.example:8090")
    assert status == 400, text  # the guard: not a name the dashboard serves
    assert "gateway_bot_" not in text


async def test_behind_a_proxy_loopback_is_no_longer_trusted(proxied: Served) -> None:
    """The proxy connects over loopback for everyone on the internet: only the token (or a
    login) reads the metrics there, whatever X-Forwarded-For says."""
    status, _ = await fetch(proxied.url("127.0.0.1"))
    assert status == 401
    status, _ = await fetch(proxied.url("127.0.0.1"), **{"X-Forwarded-For": "127.0.0.1"})
    assert status == 401
    status, text = await fetch(proxied.url("127.0.0.1"), Authorization=f"Bearer {METRICS_TOKEN}")
    assert status == 200
    assert "gateway_bot_tasks" in text


async def test_a_logged_in_operator_reads_them_too(proxied: Served) -> None:
    """Behind a proxy (no loopback exemption) the dashboard's login is enough. Tests stay on
    loopback (no traffic to other addresses here): a peer from another host is what the
    proxied server sees for everyone, and the peer rule itself is checked below."""
    async with ClientSession(headers=FROM_THE_DASHBOARD) as browser:
        login = await browser.post(
            proxied.url("127.0.0.1", "/login"), data={"token": TOKEN}, allow_redirects=False
        )
        assert login.status == 303
        # the cookie is Secure behind a proxy (TLS ends there): sent by hand over plain http
        cookie = "; ".join(f"{c.key}={c.value}" for c in login.cookies.values())
        async with browser.get(proxied.url("127.0.0.1"), headers={"Cookie": cookie}) as response:
            assert response.status == 200
            assert "gateway_bot_queue_depth" in await response.text()


def test_the_peer_rule() -> None:
    """The rule itself, for peers a test on one machine cannot be (IPv6, mapped IPv4)."""
    plain = DashboardSettings(token=TOKEN)
    with_token = DashboardSettings(token=TOKEN, metrics_token=METRICS_TOKEN)
    proxied = DashboardSettings(token=TOKEN, metrics_token=METRICS_TOKEN, behind_proxy=True)
    for peer in ("127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"):
        assert metrics_readable(peer, None, plain, "127.0.0.1:8090"), peer
        assert not metrics_readable(peer, None, proxied, "127.0.0.1:8090"), peer
    for host in ("localhost", "localhost:9", "127.0.0.1", "[::1]:8090", "[::1]", "::1"):
        assert metrics_readable("127.0.0.1", None, plain, host), host
    for host in (None, "", "evil.example", "evil.example:8090", "127.0.0.1.evil.example",
                 "localhost.evil.example:1", "[::1", "0.0.0.0:8090"):  # fmt: skip
        assert not metrics_readable("127.0.0.1", None, plain, host), f"Host {host!r}"
    for peer in ("203.0.113.9", "2001:db8::1", "::ffff:203.0.113.9", "", None, "localhost"):
        assert not metrics_readable(peer, None, with_token), peer
        assert not metrics_readable(peer, f"Bearer {METRICS_TOKEN}x", with_token), peer
        assert metrics_readable(peer, f"Bearer {METRICS_TOKEN}", with_token), peer
        assert metrics_readable(peer, f"bearer  {METRICS_TOKEN}", with_token), peer
        assert not metrics_readable(peer, f"Basic {METRICS_TOKEN}", with_token), peer
        assert not metrics_readable(peer, "Bearer ", plain), "no token configured: none works"


def metric(text: str, name: str, **labels: str) -> float:
    shown = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    pattern = "^" + re.escape(f"{name}{{{shown}}}" if labels else name) + r" (\S+)$"
    found = re.search(pattern, text, re.M)
    assert found, f"no {name} {labels} in:\n{text}"
    return float(found.group(1))


async def test_the_metrics_of_a_real_daemon_count_its_task(
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
    status, before = await fetch(base + "metrics")
    assert status == 200
    assert metric(before, "gateway_bot_channel_up", channel="console") == 1.0
    assert metric(before, "gateway_bot_tasks", state="executing", reason="") == 0.0
    assert metric(before, "gateway_bot_approvals_pending", channel="console") == 0.0

    daemon.send("count the files")
    daemon.expect(r"^agent> ")
    deadline = time.monotonic() + 30  # the task completes just after its reply is shown
    while True:
        status, after = await fetch(base + "metrics", Authorization=f"Bearer {METRICS_TOKEN}")
        assert status == 200
        if 'gateway_bot_tasks{reason="success",state="completed"} 1.0' in after:
            break
        assert time.monotonic() < deadline, after
        await asyncio.sleep(0.1)
    assert metric(after, "gateway_bot_queue_depth") == 0.0
    assert metric(after, "gateway_bot_task_duration_seconds_count", reason="success") == 1.0
    assert metric(after, "gateway_bot_task_duration_seconds_sum", reason="success") > 0.0
    assert metric(after, "gateway_bot_containers_listed") == 1.0
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr
