"""The dashboard's web server: the aiohttp app, its guard, and starting and stopping it
inside the daemon.

The guard runs before every handler. Nothing but the login page and its two static files is
served without a valid session cookie: a page request without one is sent to the login, any
other request (an action, the live stream) gets 401. Every POST needs the session's CSRF
token. A request whose ``Origin`` names another site, or that the browser marks
``Sec-Fetch-Site: cross-site``, is refused before anything else, cookie or not, for actions
and the live stream alike (a cross-site page must not drive or read the dashboard through
the operator's browser). The client's address is never consulted, so ``X-Forwarded-For``
claims gain nothing, with or without ``behind_proxy``. The one exception is ``/metrics``
(``dashboard/metrics.py``): a loopback socket peer or the metrics token reads it without a
session.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp_jinja2
import jinja2
from aiohttp import web

from gateway_bot.config.dashboard import DashboardSettings
from gateway_bot.core.application import Application
from gateway_bot.core.feed import ChangeFeed, Subscription
from gateway_bot.dashboard import live, metrics, pages
from gateway_bot.dashboard.context import (
    APPLICATION,
    CSRF,
    FEED,
    SESSION,
    SETTINGS,
    SIGNER,
    STREAMS,
)
from gateway_bot.dashboard.metrics import DURATIONS, METRICS_PATH, TaskDurations
from gateway_bot.dashboard.sessions import COOKIE_NAME, SessionSigner, load_or_make_key

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PUBLIC_PATHS = frozenset({"/login", "/static/style.css", "/static/live.js"})
SHUTDOWN_TIMEOUT_S = 5.0
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # Not "no-referrer": under it Chromium sends "Origin: null" on the dashboard's own
    # form posts, which the guard refuses as cross-site (seen in the browser tests).
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def build_app(
    application: Application,
    feed: ChangeFeed,
    settings: DashboardSettings,
    key: bytes,
    durations: TaskDurations | None = None,
) -> web.Application:
    app = web.Application(middlewares=[_guard])
    if durations is not None:
        app[DURATIONS] = durations
    app[APPLICATION] = application
    app[FEED] = feed
    app[SETTINGS] = settings
    app[SIGNER] = SessionSigner(key, settings.token, settings.session_hours * 3600)
    app[STREAMS] = set()
    aiohttp_jinja2.setup(
        app,
        loader=jinja2.PackageLoader("gateway_bot.dashboard", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    app.on_response_prepare.append(_add_security_headers)
    pages.add_routes(app)
    app.router.add_get("/events", live.events)
    app.router.add_get(METRICS_PATH, metrics.metrics)
    return app


def _cross_site(request: web.Request) -> bool:
    origin = request.headers.get("Origin")
    if origin is not None and (origin == "null" or urlsplit(origin).netloc != request.host):
        return True
    return request.headers.get("Sec-Fetch-Site") == "cross-site"


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    acting = request.method not in ("GET", "HEAD") or request.path == "/events"
    if acting and _cross_site(request):
        raise web.HTTPForbidden(text="Cross-site request refused.")
    if request.path in PUBLIC_PATHS:
        return await handler(request)
    scraping = request.path == METRICS_PATH
    if scraping and metrics.metrics_readable(
        metrics.request_peer(request),
        request.headers.get("Authorization"),
        request.app[SETTINGS],
        request.headers.get("Host"),
    ):
        return await handler(request)
    signer = request.app[SIGNER]
    session = signer.verify(request.cookies.get(COOKIE_NAME))
    if session is None:
        if scraping:
            raise web.HTTPUnauthorized(
                text="Metrics need the metrics token (Authorization: Bearer), a loopback "
                "scraper, or a login.",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if acting:
            raise web.HTTPUnauthorized(text="Log in first.")
        raise web.HTTPFound("/login")
    request[SESSION] = session
    request[CSRF] = signer.csrf_token(session)
    if request.method == "POST":
        form = await request.post()
        offered = form.get("csrf")
        if not isinstance(offered, str) or not signer.csrf_matches(session, offered):
            raise web.HTTPForbidden(text="The form's CSRF token is missing or wrong.")
    return await handler(request)


async def _add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)


def _ssl_context(settings: DashboardSettings) -> ssl.SSLContext | None:
    if settings.tls_certificate is None or settings.tls_key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(settings.tls_certificate, settings.tls_key)
    return context


class DashboardServer:
    """Started by the daemon after its service, stopped before the change feed closes."""

    def __init__(
        self,
        application: Application,
        feed: ChangeFeed,
        settings: DashboardSettings,
        state_dir: Path,
        durations: TaskDurations | None = None,
    ) -> None:
        self._application = application
        self._durations = durations
        self._feed = feed
        self._settings = settings
        self._key_dir = state_dir / "dashboard"
        self._runner: web.AppRunner | None = None
        self._streams: set[Subscription] = set()
        self.url = ""

    async def start(self) -> str:
        """Listen; returns the URL. Raises OSError when the address cannot be bound."""
        key = await asyncio.to_thread(load_or_make_key, self._key_dir)
        app = build_app(self._application, self._feed, self._settings, key, self._durations)
        self._streams = app[STREAMS]
        runner = web.AppRunner(app, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
        await runner.setup()
        context = await asyncio.to_thread(_ssl_context, self._settings)
        site = web.TCPSite(runner, self._settings.host, self._settings.port, ssl_context=context)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        host, port = runner.addresses[0][:2]
        scheme = "https" if context is not None else "http"
        shown = f"[{host}]" if ":" in str(host) else str(host)
        self.url = f"{scheme}://{shown}:{port}/"
        log.info("dashboard at %s", self.url)
        return self.url

    async def stop(self) -> None:
        # Live streams wait on the feed: end them first, or shutdown waits for its timeout.
        for subscription in list(self._streams):
            subscription.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
