"""The dashboard's web server: the aiohttp app, its guard (``guard.py``: host, origin,
session, CSRF), and starting and stopping it inside the daemon.

Every text a page shows passes ``domain.display.visible`` (the templates' ``finalize``):
control and bidi characters a sender, an agent or a file name brought are shown as
escapes, on every page and whatever a template looks like, the way the console shows them.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path

import aiohttp_jinja2
import jinja2
from aiohttp import web
from markupsafe import Markup

from gateway_bot.config.dashboard import DashboardSettings, token_weakness
from gateway_bot.core.application import Application
from gateway_bot.core.feed import ChangeFeed, Subscription
from gateway_bot.dashboard import assets, decisions, live, login, metrics, nav, pages, task_page
from gateway_bot.dashboard.context import (
    APPLICATION,
    FEED,
    LOGIN_LIMITS,
    SESSIONS,
    SETTINGS,
    STREAMS,
)
from gateway_bot.dashboard.guard import guard
from gateway_bot.dashboard.login_limits import LoginLimits
from gateway_bot.dashboard.metrics import DURATIONS, METRICS_PATH, STEPS, TaskDurations, TaskSteps
from gateway_bot.dashboard.sessions import SessionBook, load_or_make_key
from gateway_bot.domain.display import visible
from gateway_bot.state.dashboard_sessions_store import OWNER, DashboardSessions
from gateway_bot.state.database import Database

log = logging.getLogger(__name__)

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
    *,
    database: Database,
    login_limits: LoginLimits | None = None,
) -> web.Application:
    """``database``: the state database, where sessions live (it must be open before the
    app serves). ``login_limits``: the login pace's memory (tests pass one with a clock
    they move)."""
    app = web.Application(middlewares=[guard, nav.header])
    if durations is not None:
        app[DURATIONS] = durations
    app[APPLICATION] = application
    app[STEPS] = TaskSteps()
    app[FEED] = feed
    app[SETTINGS] = settings
    app[SESSIONS] = SessionBook(
        DashboardSessions(database),
        key,
        settings.token,
        lifetime_s=settings.session_hours * 3600,
        idle_s=settings.session_idle_minutes * 60,
    )
    database.add_pruner(OWNER, lambda _before: app[SESSIONS].sweep())  # daily, by the daemon
    app[LOGIN_LIMITS] = login_limits if login_limits is not None else LoginLimits()
    app[STREAMS] = set()
    environment = aiohttp_jinja2.setup(
        app,
        loader=jinja2.PackageLoader("gateway_bot.dashboard", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        finalize=_shown,
    )
    environment.globals.update(pending_count=nav.pending_count, page_path=nav.page_path)
    app.on_startup.append(_sweep_sessions)
    app.on_response_prepare.append(_add_security_headers)
    assets.add_routes(app)
    login.add_routes(app)
    pages.add_routes(app)
    decisions.add_routes(app)
    task_page.add_routes(app)
    app.router.add_get("/events", live.events)
    app.router.add_get(METRICS_PATH, metrics.metrics)
    return app


def _shown(value: object) -> object:
    """Every ``{{ ... }}`` of every template, before autoescaping: text with its control
    and bidi characters as visible escapes (which hold no HTML special character, so
    markup stays markup)."""
    if isinstance(value, Markup):
        return Markup(visible(str(value)))
    if isinstance(value, str):
        return visible(value)
    return value


async def _sweep_sessions(app: web.Application) -> None:
    """Sessions made with a login token that is no longer configured (it was rotated),
    and idle or expired ones, end before the first request."""
    if ended := await app[SESSIONS].sweep():
        log.info("dashboard: ended %d old sessions", ended)


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
        database: Database,
        durations: TaskDurations | None = None,
    ) -> None:
        self._application = application
        self._durations = durations
        self._database = database
        self._feed = feed
        self._settings = settings
        self._key_dir = state_dir / "dashboard"
        self._runner: web.AppRunner | None = None
        self._streams: set[Subscription] = set()
        self.url = ""

    async def start(self) -> str:
        """Listen; returns the URL. Raises OSError when the address cannot be bound."""
        if (weak := await asyncio.to_thread(token_weakness, self._settings.token)) is not None:
            log.warning("%s", weak)
        key = await asyncio.to_thread(load_or_make_key, self._key_dir)
        app = build_app(
            self._application,
            self._feed,
            self._settings,
            key,
            self._durations,
            database=self._database,
        )
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
