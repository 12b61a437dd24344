"""The dashboard's guard: what every request passes before any handler, in this order.

1. **Host.** The ``Host`` header must name the dashboard: a loopback address,
   ``localhost``, the configured ``host``, the ``public_url``'s host, or (bound to a
   wildcard address) any IP address. A page on a name its owner later points at 127.0.0.1
   (DNS rebinding) is then the same origin as the dashboard to the browser, but its
   requests still say its own name, and are refused here, login included.
2. The login page's two static files are served to anyone; ``/metrics`` to its scrapers
   (``dashboard/metrics.py``).
3. **Where from.** Everything else must come from the dashboard's own origin, port
   included: the browser's ``Sec-Fetch-Site`` must say ``same-origin`` (or ``none``, a
   typed address or bookmark, for a page), and an ``Origin`` must be the dashboard's.
   A browser that sends no fetch metadata must send a ``Referer`` from here instead. Pages
   are checked as well as actions: cookies are scoped by host, not port, so a page served
   by any other program on this host (another port) is "same-site" and its requests carry
   the dashboard's cookie; only the origin says they are not the dashboard's. A link
   followed from elsewhere (a chat message) gets a page with a link to continue instead.
4. **Session.** A page without a live session is sent to the login, anything else gets
   401; every POST needs the session's CSRF token.

The client's address is never consulted here, so ``X-Forwarded-For`` claims gain nothing.
"""

from __future__ import annotations

import html
import ipaddress
import re
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web

from gateway_bot.config.dashboard import DashboardSettings
from gateway_bot.dashboard import metrics
from gateway_bot.dashboard.assets import STATIC_PATHS
from gateway_bot.dashboard.context import CSRF, SESSION, SESSIONS, SETTINGS
from gateway_bot.dashboard.sessions import COOKIE_NAME, SECURE_COOKIE_NAME

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
LOGIN_PATH = "/login"
_DEFAULT_PORTS = {"http": 80, "https": 443}
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9_\-./]*")
Origin = tuple[str, str, int]


def secure(settings: DashboardSettings) -> bool:
    """Does the browser reach the dashboard over https (here, or at the proxy)?"""
    return settings.behind_proxy or settings.tls_certificate is not None


def cookie_name(settings: DashboardSettings) -> str:
    return SECURE_COOKIE_NAME if secure(settings) else COOKIE_NAME


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    host = _host(request.headers.get("Host"))
    if host is None or not _serves(host[0], settings):
        raise web.HTTPBadRequest(
            text="This server does not serve that host name. Open the dashboard by its own "
            "address (see `gateway-bot run`'s log, or dashboard.public_url)."
        )
    if request.path in STATIC_PATHS:
        return await handler(request)
    scraping = request.path == metrics.METRICS_PATH
    if scraping and metrics.metrics_readable(
        metrics.request_peer(request),
        request.headers.get("Authorization"),
        settings,
        request.headers.get("Host"),
    ):
        return await handler(request)
    from_here = _from_here(request, _own_origins(request, settings, host))
    if scraping and not from_here:
        raise _metrics_unauthorized()
    if not from_here:
        raise _refused_from_elsewhere(request)
    if request.path == LOGIN_PATH:
        return await handler(request)
    book = request.app[SESSIONS]
    session = await book.find(request.cookies.get(cookie_name(settings)))
    if session is None:
        if scraping:
            raise _metrics_unauthorized()
        if request.method not in ("GET", "HEAD") or request.path == "/events":
            raise web.HTTPUnauthorized(text="Log in first.")
        raise web.HTTPFound(LOGIN_PATH)
    request[SESSION] = session
    request[CSRF] = book.csrf_token(session)
    if request.method == "POST":
        form = await request.post()
        offered = form.get("csrf")
        if not isinstance(offered, str) or not book.csrf_matches(session, offered):
            raise web.HTTPForbidden(text="The form's CSRF token is missing or wrong.")
    return await handler(request)


def _metrics_unauthorized() -> web.HTTPException:
    return web.HTTPUnauthorized(
        text="Metrics need the metrics token (Authorization: Bearer), a loopback scraper, "
        "or a login.",
        headers={"WWW-Authenticate": "Bearer"},
    )


def _host(header: str | None) -> tuple[str, int | None] | None:
    """The ``Host`` header's name (lower case, IPv6 without brackets) and port; None when
    it is missing or does not parse."""
    if not header or "@" in header or any(c in header for c in "/\\?#"):
        return None
    try:
        parts = urlsplit(f"//{header}")
        name, port = parts.hostname, parts.port
    except ValueError:
        return None
    return (name, port) if name else None


def _serves(name: str, settings: DashboardSettings) -> bool:
    if name in settings.served_names():
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False  # a name no configuration gave: what DNS rebinding looks like
    # An address cannot be rebound: a page can only have it as its origin if the browser
    # connected to it.
    return address.is_loopback or settings.serves_every_address()


def _own_origins(
    request: web.Request, settings: DashboardSettings, host: tuple[str, int | None]
) -> set[Origin]:
    scheme = "https" if secure(settings) else request.scheme
    name, port = host
    origins = {(scheme, name, port or _DEFAULT_PORTS.get(scheme, 0))}
    if settings.public_url is not None and (public := _origin(settings.public_url)):
        origins.add(public)
    return origins


def _origin(url: str) -> Origin | None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return (parts.scheme, parts.hostname, port or _DEFAULT_PORTS[parts.scheme])


def _from_here(request: web.Request, own: set[Origin]) -> bool:
    """Did the dashboard's own pages (or the operator, typing its address) make this
    request? An ``Origin`` and a ``Referer`` must be ours ("null" never is); then the fetch
    metadata decide; without them (an older browser), one of the two must be there (the
    dashboard's Referrer-Policy sends the ``Referer`` on its own requests)."""
    origin, referer = request.headers.get("Origin"), request.headers.get("Referer")
    if origin is not None and _origin(origin) not in own:
        return False
    if referer is not None and _origin(referer) not in own:
        return False  # a page elsewhere made it (its Referrer-Policy let its origin show)
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site == "same-origin" or (site == "none" and request.method in ("GET", "HEAD"))
    return origin is not None or referer is not None


def _refused_from_elsewhere(request: web.Request) -> web.HTTPException:
    navigating = request.method == "GET" and request.headers.get("Sec-Fetch-Mode") == "navigate"
    if not navigating:
        return web.HTTPForbidden(text="Refused: this request did not come from the dashboard.")
    path = request.path if _PLAIN_PATH.fullmatch(request.path) else "/tasks"
    link = html.escape(re.sub("/+", "/", path))
    return web.HTTPForbidden(
        content_type="text/html",
        text=f"<!doctype html><title>gateway-bot</title><p>This dashboard page was opened "
        f'from another site or another program on this computer. <a href="{link}">Continue '
        f"to {link}</a></p>",
    )
