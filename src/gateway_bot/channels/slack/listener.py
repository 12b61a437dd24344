"""Hears Slack over Socket Mode or the HTTP Events API (through Bolt), and submits what
engages the bot.

Bolt runs with ``process_before_response=True``: our handler runs *before* Bolt answers
Slack, so the Socket Mode ack (or the HTTP 200) goes out only after ``submit`` committed
the message to SQLite. If storing fails the handler raises, Bolt answers 500, nothing is
acked, and Slack delivers the event again. Events over Socket Mode skip Bolt's dispatch
(decision 0132: a third of the way to the acknowledgement), with the same outcome: Bolt's
``authorize`` and self-event rule are applied here, a failure leaves the envelope unacked.

Retried deliveries and the two events Slack sends for one post (``message`` and
``app_mention``) share one message id (team, channel, ts), so the core runs the message
once.

Identity (``auth.test``: the bot's user id) is learnt once at start and handed to Bolt
through ``authorize``, which also lets Bolt drop the bot's own posts before they reach us.

The listener task is supervised: whatever ends it but a stop or a token Slack refuses (an
answer slack_sdk chokes on, a bug), it is logged, shown as DEGRADED health, and started
again with backoff. A dead listener must never look "connected".
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from gateway_bot.channels.slack import catch_up, events, webapi
from gateway_bot.channels.slack.health import FATAL_ERRORS, Health, backoff_delay
from gateway_bot.channels.slack.http_events import HttpEventsServer
from gateway_bot.channels.slack.records import SlackRecords
from gateway_bot.channels.slack.socket_mode import Envelope, SocketModeConnection, stop_task
from gateway_bot.config.channels import SlackChannelSettings
from gateway_bot.core.channel import Submit
from gateway_bot.domain.messages import ChannelHealth, ChannelStatus, RawMessage

log = logging.getLogger(__name__)

CHANNEL = "slack"
RESTART_RESET_S = 60.0
"""A listener that ran this long before it ended restarts at the shortest backoff again."""


@dataclass(frozen=True)
class BotIdentity:
    user_id: str
    bot_id: str
    team_id: str


class NotStored(RuntimeError):
    """submit() did not commit the message: Slack must deliver it again."""


class SlackListener:
    def __init__(
        self, settings: SlackChannelSettings, client: AsyncWebClient, records: SlackRecords
    ) -> None:
        self._settings = settings
        self._client = client
        self._records = records
        self._health = Health()
        self._identity: BotIdentity | None = None
        self._identity_lock = asyncio.Lock()
        self._submit: Submit | None = None
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._socket: SocketModeConnection | None = None
        self._http: HttpEventsServer | None = None
        self._connections: aiohttp.ClientSession | None = None
        """The Web API client's kept-alive connections while the listener runs."""
        self._caught_up = asyncio.Event()
        """Set once what was said while no listener ran is submitted (``catch_up.py``):
        events wait for it, so a conversation's messages go in in the order they were sent."""
        self._catching_up: asyncio.Task[None] | None = None
        self._behind = False
        """The last catch-up failed: the mark stays put and the next tick tries again."""
        self._marking: asyncio.Task[None] | None = None

        # Bolt passes arguments by parameter name, so it gets plain functions, not methods.
        async def authorize(
            enterprise_id: str | None, team_id: str | None, user_id: str | None
        ) -> AuthorizeResult:
            return await self._authorize(enterprise_id, team_id, user_id)

        async def on_event(body: dict[str, Any], context: AsyncBoltContext) -> None:
            await self._on_event(body, context.team_id or "", context.bot_user_id or "")

        async def on_click(body: dict[str, Any], ack: AsyncAck) -> None:
            await self._on_click(body, ack)

        self.app = AsyncApp(
            client=AsyncWebClient(base_url=settings.api_base_url),
            authorize=authorize,
            signing_secret=settings.signing_secret or "",
            request_verification_enabled=settings.transport == "http",
            process_before_response=True,
        )
        self.app.event(re.compile(".*"))(on_event)
        self.app.block_action(re.compile(".*"))(on_click)

    @property
    def status(self) -> ChannelStatus:
        return self._health.status

    async def start(self, submit: Submit) -> None:
        """Returns at once; connecting (and reconnecting) runs in the background."""
        self._submit = submit
        if self._connections is None:
            self._connections = webapi.keep_alive(self._client)
        if self._settings.transport == "http":
            self._http = HttpEventsServer(
                self.app,
                self._settings.signing_secret or "",
                self._settings.http_host,
                self._settings.http_port,
                self._settings.http_path,
            )
            try:
                await self._http.start()
            except OSError as exc:
                self._health.set(
                    ChannelHealth.FAILED, f"cannot listen on {self._http.address}: {exc.strerror}"
                )
                return
        self._stopping = False
        self._task = asyncio.create_task(self._supervise())

    async def stop(self) -> None:
        self._stopping = True
        if self._socket is not None:
            await self._socket.stop()
        await stop_task(self._task)
        await stop_task(self._catching_up)
        await stop_task(self._marking)
        self._catching_up = self._marking = None
        if self._http is not None:
            await self._http.stop()
        if self._connections is not None:
            await webapi.let_go(self._client, self._connections)
            self._connections = None

    async def _supervise(self) -> None:
        attempt = 0
        while True:
            started = time.monotonic()
            try:
                await self._run()
            except Exception as exc:
                log.exception("slack: the listener stopped")
                reason = f"the listener stopped ({exc!r})"
            else:
                done = self._http is not None or self._health.status.health is ChannelHealth.FAILED
                if self._stopping or done:
                    return
                reason = "the listener stopped"
            if self._stopping:
                return
            if time.monotonic() - started > RESTART_RESET_S:
                attempt = 0
            delay = backoff_delay(attempt, self._settings.reconnect_max_delay_seconds)
            attempt += 1
            self._health.set(ChannelHealth.DEGRADED, f"{reason}; restarting in {delay:.1f} s")
            await asyncio.sleep(delay)

    async def _run(self) -> None:
        if await self._learn_identity() is None:
            return
        if self._marking is None:
            self._marking = asyncio.create_task(self._keep_mark())
        if self._http is not None:
            self._health.set(ChannelHealth.CONNECTED, f"Events API on {self._http.address}")
            self._start_catching_up()
            return
        app_token = self._settings.app_token or ""
        app_client = AsyncWebClient(token=app_token, base_url=self._settings.api_base_url)
        self._socket = SocketModeConnection(
            app_client,
            app_token,
            self._handle_envelope,
            self._health,
            max_delay_s=self._settings.reconnect_max_delay_seconds,
            on_hello=self._start_catching_up,
        )
        await self._socket.run()

    # -- what was said while no listener ran (``catch_up.py``) --------------------------

    def _start_catching_up(self) -> None:
        """At every connection (after the hello: what is said from now on comes as
        events); one at a time."""
        if self._catching_up is not None and not self._catching_up.done():
            return
        self._caught_up.clear()
        self._catching_up = asyncio.create_task(self._catch_up())

    async def _catch_up(self) -> None:
        identity = await self.identity()
        try:
            await catch_up.catch_up(
                self._client,
                self._records,
                identity.team_id,
                lambda event: self._take_event(event, identity.team_id, identity.user_id),
            )
        except Exception:
            # Events go on (Slack's retries still cover a short gap); the mark stays where
            # it was, and the next tick of ``_keep_mark`` reads from it again.
            log.exception("slack: reading what was said while no listener ran failed")
            self._behind = True
        else:
            self._behind = False
        finally:
            self._caught_up.set()

    async def _keep_mark(self) -> None:
        identity = await self.identity()
        while True:
            await asyncio.sleep(catch_up.MARK_EVERY_S)
            connected = self._health.status.health is ChannelHealth.CONNECTED
            if connected and self._behind and self._caught_up.is_set():
                self._start_catching_up()
            elif connected and self._caught_up.is_set():
                try:
                    mark = time.time() - catch_up.GRACE_S
                    await self._records.set_heard_up_to(identity.team_id, mark)
                except Exception:
                    log.warning("slack: could not record how far it has heard", exc_info=True)

    # -- identity ----------------------------------------------------------------------

    async def identity(self) -> BotIdentity:
        async with self._identity_lock:
            if self._identity is None:
                response = await self._client.auth_test()
                self._identity = BotIdentity(
                    user_id=str(response.get("user_id") or ""),
                    bot_id=str(response.get("bot_id") or ""),
                    team_id=str(response.get("team_id") or ""),
                )
            return self._identity

    async def _learn_identity(self) -> BotIdentity | None:
        """auth.test with backoff; None (and FAILED) when Slack refuses the bot token."""
        attempt = 0
        while True:
            try:
                return await self.identity()
            except SlackApiError as exc:
                error = str(exc.response.get("error", "unknown_error"))
                if error in FATAL_ERRORS:
                    self._health.set(
                        ChannelHealth.FAILED,
                        f"Slack refused the bot token ({error}): check channels.slack.bot_token",
                    )
                    return None
                reason = f"auth.test failed: {error}"
            except Exception as exc:  # network trouble of any kind: retry
                reason = f"cannot reach Slack: {exc or type(exc).__name__}"
            delay = backoff_delay(attempt, self._settings.reconnect_max_delay_seconds)
            attempt += 1
            self._health.set(ChannelHealth.DEGRADED, f"{reason}; retrying in {delay:.1f} s")
            await asyncio.sleep(delay)

    async def _authorize(
        self, enterprise_id: str | None, team_id: str | None, user_id: str | None
    ) -> AuthorizeResult:
        identity = await self.identity()
        return AuthorizeResult(
            enterprise_id=enterprise_id,
            team_id=team_id,
            bot_token=self._settings.bot_token,
            bot_user_id=identity.user_id,
            bot_id=identity.bot_id,
            user_id=user_id,
        )

    # -- Socket Mode -------------------------------------------------------------------

    async def _handle_envelope(self, envelope: Envelope) -> Envelope | None:
        """The envelope's ack, or None to leave it unacked (Slack delivers it again).
        Raises when Bolt cannot make a request of the envelope (the connection then logs,
        acks and drops it)."""
        payload = envelope.get("payload")
        if not isinstance(payload, dict) or not isinstance(payload.get("event", {}), dict):
            # Bolt's own middleware would fail on it (500) and Slack redeliver it in vain.
            log.warning("dropped a malformed Socket Mode envelope: %r", envelope)
            return {"envelope_id": envelope["envelope_id"]}
        ack: Envelope = {"envelope_id": envelope["envelope_id"]}
        if envelope.get("type") == "events_api" and payload.get("type") == "event_callback":
            # Events skip Bolt's dispatch (decision 0132): it was a third of the time from
            # the frame to the acknowledgement. A failure to store is Bolt's 500: unacked.
            try:
                await self._on_event_callback(payload)
            except Exception:
                log.exception("envelope %s left unacked: Slack will redeliver it", ack)
                return None
            return ack
        headers: dict[str, str | Sequence[str]] = {}
        if envelope.get("retry_attempt"):
            headers["x-slack-retry-num"] = str(envelope["retry_attempt"])
            headers["x-slack-retry-reason"] = str(envelope.get("retry_reason") or "")
        request = AsyncBoltRequest(mode="socket_mode", body=payload, headers=headers or None)
        response = await self.app.async_dispatch(request)
        if response.status >= 500:
            log.warning(
                "envelope %s left unacked: Slack will redeliver it", envelope["envelope_id"]
            )
            return None
        if response.body and response.body.startswith("{"):
            ack["payload"] = json.loads(response.body)
        return ack

    async def _on_event_callback(self, body: dict[str, Any]) -> None:
        """An Events API event as Bolt's pipeline would hand it to ``_on_event`` (its
        authorize, then its self-event rule), without the pipeline."""
        identity = await self.identity()
        event = body.get("event")
        if isinstance(event, dict) and events.is_own(event, identity.user_id, identity.bot_id):
            return
        await self._on_event(body, identity.team_id, identity.user_id)

    # -- Bolt listeners ----------------------------------------------------------------

    async def _on_event(self, body: dict[str, Any], team: str, bot_user_id: str) -> None:
        """``team``: the workspace when the body does not say (Bolt's context)."""
        event = body.get("event")
        if not isinstance(event, dict):
            # Acked and dropped: raising would answer 500 and Slack would redeliver it.
            log.warning("dropped a Slack event that is not an object: %r", event)
            return
        await self._caught_up.wait()
        await self._take_event(event, str(body.get("team_id") or team), bot_user_id)

    async def _take_event(self, event: dict[str, Any], team: str, bot_user_id: str) -> None:
        if events.is_bot_added(event, bot_user_id):
            await self._submit_or_raise(
                RawMessage(
                    channel=CHANNEL,
                    message_id=f"{team}:joined:{event['channel']}:{event.get('event_ts', '')}",
                    sender=str(event.get("inviter") or ""),
                    payload={"kind": "joined", "team_id": team, "event": event},
                    received_at=time.time(),
                )
            )
            return
        if not events.is_person_talking(event):
            return
        listen_all = self._settings.listen == "all"
        if not events.should_submit(event, bot_user_id, False, listen_all=listen_all):
            # Only an un-mentioned reply in a channel thread needs the threads table: a
            # DM or a mention goes in without that read before its commit (decision 0104).
            in_thread = events.is_thread_reply(event) and await self._records.in_thread(
                team, event["channel"], events.thread_root(event)
            )
            if not events.should_submit(event, bot_user_id, in_thread, listen_all=listen_all):
                return
        await self._submit_or_raise(
            RawMessage(
                channel=CHANNEL,
                message_id=events.message_id(team, event),
                sender=str(event["user"]),
                payload={
                    "kind": "message",
                    "team_id": team,
                    "bot_user_id": bot_user_id,
                    "event": event,
                },
                received_at=time.time(),
            )
        )
        engaging = events.is_direct(event) or events.mentions_bot(event, bot_user_id)
        if engaging and not events.is_thread_reply(event):
            await self._records.join_thread(team, event["channel"], event["ts"])

    async def _on_click(self, body: dict[str, Any], ack: AsyncAck) -> None:
        await self._caught_up.wait()
        problem = events.click_problem(body)
        if problem is not None:
            # Acked and dropped: it fails the same way every time Slack would redeliver it.
            log.warning("ignored a Slack click: %s", problem)
            await ack()
            return
        await self._submit_or_raise(
            RawMessage(
                channel=CHANNEL,
                message_id=events.action_message_id(body),
                sender=str(body["user"]["id"]),
                payload={"kind": "click", "body": body},
                received_at=time.time(),
            )
        )
        await ack()

    async def _submit_or_raise(self, raw: RawMessage) -> None:
        if self._submit is None or not await self._submit(raw):
            raise NotStored(f"message {raw.message_id} was not stored")
