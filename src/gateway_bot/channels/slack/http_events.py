"""The HTTP Events API transport: Slack POSTs events and button clicks to the daemon's own
aiohttp server, which hands each request to Bolt.

Bolt checks the ``X-Slack-Signature`` HMAC with the signing secret and refuses a
``X-Slack-Request-Timestamp`` older than five minutes (both answered 401, nothing runs),
and answers ``url_verification`` and ``ssl_check`` itself. A message is committed to
SQLite before the 200 goes out; if that fails the answer is 500 and Slack retries. A body
Bolt cannot read (not JSON, a form without a JSON payload) is a 400: retrying it cannot
help, and a 500 would have Slack send it again and again; so is a signed body that is not
an event object. A timestamp that is not a number is a 401 (slack_sdk's verifier raises on
it, which was a 500).

Binds 127.0.0.1 unless configured otherwise: put a TLS reverse proxy in front of it.
"""

from __future__ import annotations

import logging

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp
from slack_sdk.signature import SignatureVerifier

log = logging.getLogger(__name__)


class HttpEventsServer:
    def __init__(self, app: AsyncApp, signing_secret: str, host: str, port: int, path: str) -> None:
        self._app = app
        self._verifier = SignatureVerifier(signing_secret)
        self._host = host
        self._port = port
        self._path = path
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        application = web.Application(client_max_size=4 * 1024 * 1024)
        application.router.add_post(self._path, self._receive)
        self._runner = web.AppRunner(application, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self._port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def address(self) -> str:
        return f"http://{self._host}:{self._port}{self._path}"

    async def _receive(self, request: web.Request) -> web.Response:
        if not request.headers.get("X-Slack-Request-Timestamp", "").isdigit():
            # slack_sdk's verifier raises ValueError on it (a 500 and Slack's retries)
            return web.Response(status=401, text="invalid request timestamp")
        try:
            bolt_request = await to_bolt_request(request)
        except Exception as exc:  # the body's fault, whatever Bolt's parser raised
            log.warning("slack: refused an Events API body that cannot be read: %r", exc)
            return web.Response(status=400, text="malformed body")
        body = bolt_request.body
        if not isinstance(body, dict) or not isinstance(body.get("event", {}), dict):
            # Bolt's middleware fails on it (500, and Slack's retries). Judged after the
            # signature, so a forger gets the same 401 as for any other body.
            if not self._verifier.is_valid(
                bolt_request.raw_body,
                request.headers.get("X-Slack-Request-Timestamp"),
                request.headers.get("X-Slack-Signature"),
            ):
                return web.Response(status=401, text="invalid request")
            log.warning("slack: refused an Events API body that is not an event object")
            return web.Response(status=400, text="malformed body")
        bolt_response = await self._app.async_dispatch(bolt_request)
        return await to_aiohttp_response(bolt_response)
