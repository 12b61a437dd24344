"""The channel's health as the dashboard sees it. When the homeserver goes away the channel
reports itself DEGRADED and retries with back-off; when it returns the channel is CONNECTED
again and nothing said meanwhile is lost (the outage is a switchable proxy in front of the
real Synapse). Credentials the homeserver refuses make it FAILED, not retried forever."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from gateway_bot.channels.matrix import MatrixAdapter
from gateway_bot.config.channels import MatrixChannelSettings
from gateway_bot.domain.messages import ChannelHealth, InboundMessage, RawMessage
from gateway_bot.state.database import Database
from tests.support.synapse_fixtures import SynapseServer, membership

pytestmark = pytest.mark.slow


class SwitchableProxy:
    """Forwards to Synapse while ``up``; answers 502 (as a load balancer would) when down."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.up = True
        self.base_url = ""
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.Response:
        if not self.up:
            return web.Response(status=502, text="bad gateway")
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
        async with self._session.request(
            request.method,
            self.target + request.path_qs,
            headers=headers,
            data=await request.read(),
        ) as answer:
            body = await answer.read()
            kept = {"Content-Type": answer.headers.get("Content-Type", "application/json")}
            return web.Response(status=answer.status, body=body, headers=kept)


@pytest.fixture
async def proxy(synapse: SynapseServer) -> AsyncIterator[SwitchableProxy]:
    switch = SwitchableProxy(synapse.base_url)
    await switch.start()
    yield switch
    await switch.stop()


async def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def test_sync_failures_degrade_the_channel_and_it_recovers(
    meet, synapse: SynapseServer, proxy: SwitchableProxy, tmp_path: Path, state_database: Database
) -> None:
    alice = await meet("alice")
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id])
    settings = MatrixChannelSettings(
        homeserver=proxy.base_url,
        user_id=bot.user_id,
        password=bot.password,
        allowed_users=[alice.user_id],
        sync_timeout_seconds=1,
    )
    adapter = MatrixAdapter(settings, tmp_path, state_database)
    heard: list[RawMessage] = []

    async def submit(raw: RawMessage) -> bool:
        heard.append(raw)
        return True

    await adapter.listener.start(submit)
    try:
        await alice.wait_for(room, membership(bot.user_id, "join"))
        await _until(
            lambda: adapter.listener.status.health is ChannelHealth.CONNECTED, "never connected"
        )

        proxy.up = False
        await _until(
            lambda: adapter.listener.status.health is ChannelHealth.DEGRADED, "never degraded"
        )
        assert "retrying in" in adapter.listener.status.message
        said = await alice.say(room, "said during the outage")

        proxy.up = True
        await _until(lambda: any(r.message_id == said for r in heard), "message lost")
        # the sync's events are handed over before the status is set from its outcome
        await _until(
            lambda: adapter.listener.status.health is ChannelHealth.CONNECTED, "never recovered"
        )
        parsed = await adapter.authenticate_and_parse(heard[-1])
        assert isinstance(parsed, InboundMessage)
        assert parsed.body == "said during the outage"
        assert parsed.sender_allowed
        assert parsed.is_direct
    finally:
        await adapter.listener.stop()


async def _noop_submit(raw: RawMessage) -> bool:
    return True


@pytest.mark.parametrize("credential", ["good token", "bad token", "bad password"])
async def test_credentials_connect_or_fail_for_good(
    synapse: SynapseServer, tmp_path: Path, credential: str, state_database: Database
) -> None:
    bot = await synapse.register("bot")
    secret = {
        "good token": {"access_token": bot.access_token},
        "bad token": {"access_token": "syt_not_a_token"},
        "bad password": {"password": "not-the-password"},
    }[credential]
    settings = MatrixChannelSettings(homeserver=synapse.base_url, user_id=bot.user_id, **secret)
    adapter = MatrixAdapter(settings, tmp_path, state_database)
    await adapter.listener.start(_noop_submit)
    try:
        expected = ChannelHealth.CONNECTED if credential == "good token" else ChannelHealth.FAILED
        await _until(lambda: adapter.listener.status.health is expected, f"never {expected}")
        if expected is ChannelHealth.FAILED:
            assert "login refused" in adapter.listener.status.message
    finally:
        await adapter.listener.stop()
