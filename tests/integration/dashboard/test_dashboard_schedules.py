"""The dashboard's schedules page: every schedule with its rule, zone, next run in that zone
and paused state, read through the application API; a prompt written as HTML is shown as
text, and the page needs a session like every other."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from gateway_bot.agents.claude.stream import parse_stream_line
from gateway_bot.config.dashboard import DashboardSettings
from gateway_bot.core.application import Application
from gateway_bot.core.feed import ChangeFeed
from gateway_bot.core.live_state import DaemonLiveState
from gateway_bot.dashboard.server import build_app
from gateway_bot.dashboard.sessions import load_or_make_key
from tests.core.test_schedules import ScheduleWorld
from tests.integration.dashboard.test_dashboard_security import TOKEN, Dashboard, NoContainers


@pytest.fixture
async def board(tmp_path: Path) -> AsyncIterator[Dashboard]:
    world = ScheduleWorld(tmp_path)
    feed = ChangeFeed()
    await world.start()
    assert world.service is not None
    application = Application(
        world.store,
        DaemonLiveState({world.channel.name: world.channel}, NoContainers()),  # type: ignore[arg-type]
        service=world.service,
        parse_line=parse_stream_line,
    )
    settings = DashboardSettings(token=TOKEN, operator={"fake": "owner"})
    key = load_or_make_key(tmp_path / "k")
    server = TestServer(build_app(application, feed, settings, key, database=world.store.database))
    await server.start_server()
    made = Dashboard(world, server, b"")
    yield made
    await made.client.close()
    await server.close()
    feed.close()
    await world.close()


async def test_the_schedules_page_lists_rule_zone_next_run_and_paused(board: Dashboard) -> None:
    world = board.world
    assert isinstance(world, ScheduleWorld)
    assert (await board.get("/schedules")).status == 302, "no session, no page"
    await world.command("/schedule TZ=Europe/Berlin every weekday at 9:00 check CI")
    await world.command("/schedule in 2 hours <script>alert(1)</script>")
    await world.command("/pause 2")
    await board.log_in()
    response = await board.get("/schedules")
    assert response.status == 200
    page = await response.text()
    assert "At 09:00 on Monday through Friday, Europe/Berlin" in page
    assert "Wed 2026-11-25 09:00 CET" in page, "the next run, in the schedule's zone"
    assert "check CI" in page
    assert '<tr class="schedule paused">' in page
    assert "<script>alert(1)" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
