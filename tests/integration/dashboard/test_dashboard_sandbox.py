"""The conversation page of a real `gateway-bot run` with the podman sandbox: the
conversation's container as podman reports it (idle between tasks, its age and memory),
and the network log the egress proxy wrote (the agent's requests to the model API,
allowed, through the proxy)."""

from __future__ import annotations

import re
import signal
from typing import Any

import yaml
from aiohttp import ClientSession, CookieJar

from tests.integration.dashboard.test_dashboard_run import TOKEN, dashboard_url
from tests.integration.dashboard.test_dashboard_security import FROM_THE_DASHBOARD
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.sandbox_fixtures import SandboxSetup


async def test_the_conversation_page_shows_its_container_and_network_log(
    gateway: Any, sandbox: SandboxSetup, fake_api: FakeAnthropic
) -> None:
    config = sandbox.config()
    settings = yaml.safe_load(config.read_text())
    settings["dashboard"] = {"port": 0, "token": TOKEN}
    config.write_text(yaml.safe_dump(settings))
    daemon = gateway("run", "--config", str(config))
    base = dashboard_url(daemon)
    daemon.send("hello from the box")
    daemon.expect(r"^agent> Echo: .*hello from the box")
    context_id, info = sandbox.only_container()

    async with ClientSession(
        cookie_jar=CookieJar(unsafe=True), headers=FROM_THE_DASHBOARD
    ) as browser:
        await browser.post(base + "login", data={"token": TOKEN})
        page = await (await browser.get(base + f"conversations/{context_id}")).text()
    container = re.search(r'<li class="container">(.*?)</li>', page, re.S)
    assert container, page
    line = " ".join(container.group(1).split())
    assert f"<code>{info['name']}</code>" in line
    assert '<strong class="container-status">idle</strong>' in line, "up, no task running"
    assert re.search(r"made (\d+s|\d+m\d\ds) ago", line), line
    assert re.search(r"memory \d+\.\d (KiB|MiB)", line), line
    network = page[page.index("<h2>Network</h2>") :]
    # The real proxy's time, shown as every other time on the page.
    shown = r"<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d</time>"
    assert re.search(rf'<tr class="allowed"><td>{shown}</td><td>allowed</td><td>POST</td>', network)
    assert "/v1/messages" in network
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr
