"""Dashboard logins: the config's token exchanged for a session that lives on the server,
and the CSRF token bound to that session.

Why on the server (``state/dashboard_sessions_store.py``) and not a signed cookie, as
before: a signed cookie cannot be taken back. A copy of one (from a shared screen, a
backup of the browser profile, a local program it was sent to) kept working for the rest
of its 12 hours after the operator logged out. Now the cookie carries a random secret and
the server keeps only its digest: logging out, "log out everywhere", a changed login
token, the idle limit (``session_idle_minutes``) and the absolute one (``session_hours``)
each end the session for every copy of its cookie at once.

The key in the state directory (``dashboard/session.key``, 0600, made on first start)
derives the CSRF tokens and marks which login token a session was made with.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gateway_bot.state.dashboard_sessions_store import DashboardSessions, SessionRow

COOKIE_NAME = "gwb_session"
SECURE_COOKIE_NAME = "__Host-gwb_session"
"""Over https: the ``__Host-`` prefix makes the browser refuse the cookie unless it is
Secure, for this host only (no Domain) and for every path, so no other host or http
page can plant or shadow it."""
KEY_BYTES = 32
SECRET_BYTES = 32
TOUCH_EVERY_S = 30.0
"""A session's last use is written at most this often (the idle limit's precision)."""


@dataclass(frozen=True)
class Session:
    digest: str
    """The digest of the cookie's secret: the session's name on the server."""
    created_at: float
    expires_at: float


def load_or_make_key(directory: Path) -> bytes:
    """The signing key in ``directory/session.key``; made (0600, exclusive) when missing.
    Opened without following links: the state directory is ours, but a planted link must
    not make us read or write elsewhere."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / "session.key"
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    with contextlib.suppress(FileNotFoundError):
        return _read_key(os.open(path, flags))
    key = secrets.token_bytes(KEY_BYTES)
    try:
        descriptor = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
    except FileExistsError:  # another start made it first
        return _read_key(os.open(path, flags))
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(key)
    return key


def _read_key(descriptor: int) -> bytes:
    with os.fdopen(descriptor, "rb") as handle:
        key = handle.read()
    if len(key) < KEY_BYTES:
        raise ValueError("the dashboard session key is truncated: delete it to make a new one")
    return key


class SessionBook:
    """Opens, finds and ends sessions; the login token is checked here too."""

    def __init__(
        self,
        store: DashboardSessions,
        key: bytes,
        login_token: str,
        *,
        lifetime_s: float,
        idle_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._key = key
        self._token_digest = hashlib.sha256(login_token.encode()).digest()
        self._token_mark = self._mac(f"token.{login_token}")
        self.lifetime_s = lifetime_s
        self.idle_s = idle_s
        self._clock = clock

    def token_matches(self, offered: str) -> bool:
        """Constant-time: compares digests, so neither content nor length leaks."""
        digest = hashlib.sha256(offered.encode()).digest()
        return hmac.compare_digest(digest, self._token_digest)

    async def sweep(self) -> int:
        """End the sessions that can no longer be used: made with another login token (it
        was rotated), idle too long, or past their end. At start, then now and then."""
        now = self._clock()
        return await self._store.end_stale(self._token_mark, now - self.idle_s, now)

    async def open(self) -> tuple[str, Session]:
        """A new session; returns the cookie's value and the session."""
        secret = secrets.token_urlsafe(SECRET_BYTES)
        now = self._clock()
        row = SessionRow(_digest(secret), self._token_mark, now, now, now + self.lifetime_s)
        await self._store.add(row)
        return secret, Session(row.digest, row.created_at, row.expires_at)

    async def find(self, cookie: str | None) -> Session | None:
        """The live session this cookie's secret names; None for a missing, unknown,
        ended, idle or expired one (and the latter two are ended on the way)."""
        if not cookie or len(cookie) > 128:
            return None
        return await self._live(_digest(cookie))

    async def find_again(self, session: Session) -> Session | None:
        """For a long-lived request (the live stream): the session if it still lives (it
        may have been ended since the request began); counts as a use."""
        return await self._live(session.digest)

    async def _live(self, digest: str) -> Session | None:
        row = await self._store.get(digest)
        if row is None:
            return None
        now = self._clock()
        if (
            not hmac.compare_digest(row.token_mark, self._token_mark)
            or now >= row.expires_at
            or now - row.last_used_at >= self.idle_s
        ):
            await self._store.end(row.digest)
            return None
        if now - row.last_used_at >= TOUCH_EVERY_S:
            await self._store.touch(row.digest, now)
        return Session(row.digest, row.created_at, row.expires_at)

    async def end(self, session: Session) -> None:
        await self._store.end(session.digest)

    async def end_all(self) -> int:
        return await self._store.end_all()

    def csrf_token(self, session: Session) -> str:
        return self._mac(f"csrf.{session.digest}")

    def csrf_matches(self, session: Session, offered: str) -> bool:
        return hmac.compare_digest(offered.encode(), self.csrf_token(session).encode())

    def _mac(self, text: str) -> str:
        digest = hmac.new(self._key, text.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
