"""The real dashboard app over real HTTP in front of the real core (the fast tier's fake
channel and agent, ``tests/core``), with every kind of decision switched on: action
approvals, schedules and the agent's schedule proposals, and the sender gate. For browser
tests that need many states quickly (decisions of every kind, a store full of a week's
tasks) without starting a daemon and an agent CLI per test.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from gateway_bot.config.action_rules import ActionApprovalSettings
from gateway_bot.config.dashboard import DashboardSettings
from gateway_bot.core.application import Application
from gateway_bot.core.feed import ChangeFeed
from gateway_bot.core.live_state import DaemonLiveState
from gateway_bot.dashboard.context import STREAMS
from gateway_bot.dashboard.server import build_app
from gateway_bot.dashboard.sessions import load_or_make_key
from gateway_bot.sandbox.base import SandboxContainer
from tests.core.conftest import World

TOKEN = "Vq8-decisions-dashboard-token"
OPERATOR = "owner"
"""The fake channel's owner (``tests/core/conftest.owners_access``): the dashboard decides
as this identity."""


class Containers:
    """The sandbox's answer to "which containers are there" (none unless a test adds)."""

    def __init__(self) -> None:
        self.listed: list[SandboxContainer] = []

    async def list_containers(self) -> list[SandboxContainer]:
        return list(self.listed)


class DecisionWorld(World):
    """The core world with action approvals and schedules (and so schedule proposals)."""

    def __init__(self, tmp_path: Path, **kwargs: Any) -> None:
        super().__init__(tmp_path, actions=ActionApprovalSettings(), schedules=True, **kwargs)


@dataclass
class ServedDashboard:
    world: DecisionWorld
    application: Application
    containers: Containers
    port: int

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}/"


@contextlib.asynccontextmanager
async def serving(world: DecisionWorld, tmp_path: Path) -> AsyncIterator[ServedDashboard]:
    """Start ``world`` and its dashboard on a free port; both stop on leaving."""
    feed = ChangeFeed()
    world.store.on_transition(feed.publish_transition)
    await world.start()
    containers = Containers()
    application = Application(
        world.store,
        DaemonLiveState({world.channel.name: world.channel}, containers),  # type: ignore[arg-type]
        service=world.service,
    )
    app = build_app(
        application,
        feed,
        DashboardSettings(token=TOKEN, operator={world.channel.name: OPERATOR}),
        load_or_make_key(tmp_path / "dashboard"),
        database=world.store.database,
    )
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield ServedDashboard(world, application, containers, runner.addresses[0][1])
    finally:
        for subscription in list(app[STREAMS]):
            subscription.close()
        await runner.cleanup()
        feed.close()
        await world.close()
