"""Logging in and out: the login token exchanged for a server-side session
(``sessions.py``), at a pace ``login_limits.py`` sets per client; logging out ends the
session on the server, or every session ("log out everywhere").

Apart from the pages so a redesign of how the dashboard looks leaves this untouched: the
templates only post ``token`` to ``/login`` and ``csrf`` to ``/logout`` and
``/logout/everywhere``."""

from __future__ import annotations

import logging
import math

from aiohttp import web

from gateway_bot.dashboard import metrics
from gateway_bot.dashboard.context import LOGIN_LIMITS, SESSION, SESSIONS, SETTINGS
from gateway_bot.dashboard.guard import LOGIN_PATH, cookie_name, secure
from gateway_bot.dashboard.pages import render

log = logging.getLogger(__name__)


def add_routes(app: web.Application) -> None:
    app.router.add_get(LOGIN_PATH, login_form)
    app.router.add_post(LOGIN_PATH, log_in)
    app.router.add_post("/logout", log_out)
    app.router.add_post("/logout/everywhere", log_out_everywhere)


async def login_form(request: web.Request) -> web.Response:
    return render(request, "login.html", error="")


async def log_in(request: web.Request) -> web.Response:
    limits = request.app[LOGIN_LIMITS]
    client = metrics.request_peer(request) or "unknown"
    # The form is read first: between the wait's check and a wrong token's record nothing
    # may await, or a burst of requests holding back their bodies would all be checked.
    form = await request.post()
    if (wait := limits.wait_s(client)) > 0:
        return _too_many(request, wait)
    offered = form.get("token")
    book = request.app[SESSIONS]
    if not isinstance(offered, str) or not book.token_matches(offered):
        if (earned := limits.failed(client)) > 0:
            log.warning("dashboard: wrong login tokens from %s; next try in %.0fs", client, earned)
            return _too_many(request, earned)
        return render(request, "login.html", status=401, error="That token is not right.")
    limits.succeeded(client)
    secret, _ = await book.open()
    settings = request.app[SETTINGS]
    response = web.HTTPSeeOther("/tasks")
    response.set_cookie(
        cookie_name(settings),
        secret,
        max_age=int(book.lifetime_s),
        path="/",
        httponly=True,
        samesite="Strict",
        secure=secure(settings),
    )
    raise response


def _too_many(request: web.Request, wait_s: float) -> web.Response:
    seconds = max(1, math.ceil(wait_s))
    response = render(
        request,
        "login.html",
        status=429,
        error=f"Too many wrong tokens: try again in {seconds} seconds.",
    )
    response.headers["Retry-After"] = str(seconds)
    return response


async def log_out(request: web.Request) -> web.Response:
    """Ends this session on the server: every copy of its cookie stops working."""
    await request.app[SESSIONS].end(request[SESSION])
    raise _to_login(request)


async def log_out_everywhere(request: web.Request) -> web.Response:
    """Ends every session there is (a lost laptop, a cookie seen where it should not be)."""
    ended = await request.app[SESSIONS].end_all()
    log.info("dashboard: logged out everywhere (%d sessions)", ended)
    raise _to_login(request)


def _to_login(request: web.Request) -> web.HTTPException:
    response = web.HTTPSeeOther(LOGIN_PATH)
    settings = request.app[SETTINGS]
    response.del_cookie(cookie_name(settings), path="/", secure=secure(settings) or None)
    return response
