"""Socket Mode: one websocket to Slack, reopened with backoff whenever it drops.

Why our own loop instead of slack_sdk's SocketModeClient: that client retries at a fixed
interval, hides whether it is connected, and acks envelopes in its own time. The daemon
needs three things it cannot give: an envelope acked only after the message is committed
to SQLite (an unacked envelope is redelivered by Slack, so a crash loses nothing), a
health the core can show (DEGRADED while retrying, FAILED on a token Slack refuses), and
backoff. The protocol is small: ``apps.connections.open`` gives a wss URL; Slack sends
``hello``, then envelopes (``events_api``, ``interactive``, ``slash_commands``) that we
answer with ``{"envelope_id": ...}``, and ``disconnect`` when it wants us elsewhere.

Envelopes are handled one at a time in arrival order, so messages reach the core in the
order people sent them; handling is a SQLite commit, not the agent's work. One frame never
ends the connection: a frame that is not a JSON object is ignored, and an envelope whose
handling raises (Bolt cannot make a request of it) is logged, acknowledged and dropped,
because Slack would redeliver it, and it would fail the same way, for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from gateway_bot.channels.slack.health import FATAL_ERRORS, Health, backoff_delay
from gateway_bot.core.fault_points import reached
from gateway_bot.domain.messages import ChannelHealth

log = logging.getLogger(__name__)

Envelope = dict[str, Any]
HandleEnvelope = Callable[[Envelope], Awaitable[Envelope | None]]
"""Returns the ack to send (``{"envelope_id": ...}`` plus an optional payload), or None to
leave the envelope unacked so that Slack delivers it again."""

HEARTBEAT_S = 10.0
ACK_DEFER_S = 0.001
"""How long an envelope's ack waits before it is sent. The message is on disk already and
Slack allows 3 s; the person's acknowledgement, released by the same flush, goes first:
sent at once, the ack took the loop when that post was due (a third of a millisecond of
the Slack acknowledgement's p50, more of its p99: issue 33)."""
ACK_DRAIN_S = 1.0
"""At a socket's end, how long the acks still waiting may take to go out."""


class SocketModeConnection:
    def __init__(
        self,
        app_client: AsyncWebClient,
        app_token: str,
        handle: HandleEnvelope,
        health: Health,
        *,
        max_delay_s: float,
        on_hello: Callable[[], None] | None = None,
    ) -> None:
        """``on_hello``: called when Slack greets a new connection (before any envelope on
        it is handled)."""
        self._on_hello = on_hello
        self._client = app_client
        self._app_token = app_token
        self._handle = handle
        self._health = health
        self._max_delay = max_delay_s
        self._stopping = False
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._greeted = False
        """Slack said hello on the socket being served."""

    async def run(self) -> None:
        """Connect, serve, reconnect; return only when stopped or when Slack refuses the
        token (FAILED)."""
        self._session = aiohttp.ClientSession()
        attempt = 0
        try:
            while not self._stopping:
                try:
                    url = await self._open_url()
                except SlackApiError as exc:
                    error = str(exc.response.get("error", "unknown_error"))
                    if error in FATAL_ERRORS:
                        self._health.set(
                            ChannelHealth.FAILED,
                            f"Slack refused the app token ({error}): check channels.slack."
                            "app_token and that Socket Mode is enabled for the app",
                        )
                        return
                    reason = f"apps.connections.open failed: {error}"
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    reason = f"cannot reach Slack: {exc or type(exc).__name__}"
                else:
                    ended, greeted = await self._serve(url)
                    if greeted:
                        attempt = 0
                    if ended is None:  # Slack asked us to reconnect: no pause, no alarm
                        continue
                    reason = ended
                if self._stopping:
                    break
                delay = backoff_delay(attempt, self._max_delay)
                attempt += 1
                self._health.set(ChannelHealth.DEGRADED, f"{reason}; retrying in {delay:.1f} s")
                await asyncio.sleep(delay)
        finally:
            await self._session.close()

    async def stop(self) -> None:
        self._stopping = True
        if self._ws is not None:
            await self._ws.close()

    async def _open_url(self) -> str:
        response = await self._client.apps_connections_open(app_token=self._app_token)
        return str(response["url"])

    async def _handle_one(self, envelope: Envelope) -> Envelope | None:
        try:
            return await self._handle(envelope)
        except Exception:
            log.exception("dropped Socket Mode envelope %r: it cannot be handled", envelope)
            return {"envelope_id": envelope["envelope_id"]}

    async def _serve(self, url: str) -> tuple[str | None, bool]:
        """Serve one websocket. Returns (why it ended or None for a requested reconnect,
        whether Slack said hello)."""
        assert self._session is not None
        self._greeted = False
        try:
            async with self._session.ws_connect(url, heartbeat=HEARTBEAT_S) as ws:
                self._ws = ws
                acks: asyncio.Queue[tuple[float, Envelope]] = asyncio.Queue()
                acking = asyncio.create_task(_send_acks(ws, acks), name="slack-acks")
                try:
                    if not await self._read(ws, acks):
                        return None, self._greeted
                finally:  # (while the socket can still carry what is waiting)
                    await _stop_acking(ws, acking, acks)
                close_code = ws.close_code
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            return f"Socket Mode connection failed: {exc or type(exc).__name__}", self._greeted
        finally:
            self._ws = None
        return f"Socket Mode connection closed (code {close_code})", self._greeted

    async def _read(
        self, ws: aiohttp.ClientWebSocketResponse, acks: asyncio.Queue[tuple[float, Envelope]]
    ) -> bool:
        """Handle frames until the socket ends (True) or Slack asks for a reconnect
        (False); each envelope's ack is queued for ``_send_acks``."""
        async for frame in ws:
            if frame.type is not aiohttp.WSMsgType.TEXT:
                break
            message = _json_object(frame.data)
            if message is None:
                log.warning("ignored a Socket Mode frame that is not a JSON object")
                continue
            kind = message.get("type")
            if kind == "hello":
                self._greeted = True
                self._health.set(ChannelHealth.CONNECTED, "Socket Mode connected")
                if self._on_hello is not None:
                    self._on_hello()
            elif kind == "disconnect":
                log.info("Slack asked to reconnect (%s)", message.get("reason"))
                return False
            elif "envelope_id" in message:
                ack = await self._handle_one(message)
                if ack is not None:
                    acks.put_nowait((asyncio.get_running_loop().time() + ACK_DEFER_S, ack))
        return True


async def _send_acks(
    ws: aiohttp.ClientWebSocketResponse, acks: asyncio.Queue[tuple[float, Envelope]]
) -> None:
    """One connection's acks, in order, each once its ``ACK_DEFER_S`` is over."""
    loop = asyncio.get_running_loop()
    while True:
        due, ack = await acks.get()
        if (wait := due - loop.time()) > 0:
            await asyncio.sleep(wait)
        reached("slack_acking")
        await ws.send_str(json.dumps(ack))
        reached("slack_acked")
        acks.task_done()


async def _stop_acking(
    ws: aiohttp.ClientWebSocketResponse,
    acking: asyncio.Task[None],
    acks: asyncio.Queue[tuple[float, Envelope]],
) -> None:
    """The socket is ending: the acks still waiting go out first while it is open (a
    reconnect Slack asked for); those it cannot carry (closed, or failing) Slack delivers
    again."""
    if not ws.closed and not acking.done():  # (one taken but not yet sent counts too)
        drained = asyncio.ensure_future(acks.join())
        await asyncio.wait({drained, acking}, timeout=ACK_DRAIN_S, return_when="FIRST_COMPLETED")
        drained.cancel()
    acking.cancel()
    with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError, OSError):
        await acking


def _json_object(text: str) -> Envelope | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


async def stop_task(task: asyncio.Task[None] | None) -> None:
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
