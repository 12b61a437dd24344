"""Typed keys for what the dashboard's app and requests carry (aiohttp ``AppKey``s)."""

from __future__ import annotations

from aiohttp import web

from gateway_bot.config.dashboard import DashboardSettings
from gateway_bot.core.application import Application
from gateway_bot.core.feed import ChangeFeed, Subscription
from gateway_bot.dashboard.login_limits import LoginLimits
from gateway_bot.dashboard.sessions import Session, SessionBook

APPLICATION = web.AppKey("application", Application)
FEED = web.AppKey("feed", ChangeFeed)
SETTINGS = web.AppKey("settings", DashboardSettings)
SESSIONS = web.AppKey("sessions", SessionBook)
LOGIN_LIMITS = web.AppKey("login_limits", LoginLimits)
STREAMS = web.AppKey("streams", set[Subscription])
"""The open live streams' subscriptions, closed when the server stops."""

SESSION = web.RequestKey("session", Session)
"""request[SESSION]: the verified ``Session`` (set by the guard)."""
CSRF = web.RequestKey("csrf", str)
"""request[CSRF]: the session's CSRF token, for forms."""

__all__ = [
    "APPLICATION",
    "CSRF",
    "FEED",
    "LOGIN_LIMITS",
    "SESSION",
    "SESSIONS",
    "SETTINGS",
    "STREAMS",
    "Session",
]
