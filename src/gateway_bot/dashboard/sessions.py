"""Dashboard logins: the config's token exchanged for a signed session cookie, and the CSRF
token bound to that session.

Why signed cookies and no session table: a login needs no state beyond a key, and the key
lives in the state directory (``dashboard/session.key``, 0600, made on first start), so a
restart keeps operators logged in. The signing key is derived from that key *and* the
configured token: changing the token logs everyone out; deleting the key file does too.

Cookie: ``v1.<issued>.<expires>.<nonce>.<hmac>``. The CSRF token is an HMAC of the
session's nonce, so it is unguessable without the cookie and dies with the session.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

COOKIE_NAME = "gwb_session"
KEY_BYTES = 32
_FORMAT = "v1"


@dataclass(frozen=True)
class Session:
    nonce: str
    issued_at: float
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


class SessionSigner:
    def __init__(self, key: bytes, login_token: str, lifetime_s: float) -> None:
        self._key = hmac.new(key, login_token.encode(), hashlib.sha256).digest()
        self._token_digest = hashlib.sha256(login_token.encode()).digest()
        self.lifetime_s = lifetime_s

    def token_matches(self, offered: str) -> bool:
        """Constant-time: compares digests, so neither content nor length leaks."""
        digest = hashlib.sha256(offered.encode()).digest()
        return hmac.compare_digest(digest, self._token_digest)

    def issue(self, now: float | None = None) -> str:
        issued = int(now if now is not None else time.time())
        expires = issued + int(self.lifetime_s)
        payload = f"{_FORMAT}.{issued}.{expires}.{secrets.token_urlsafe(18)}"
        return f"{payload}.{self._mac(payload)}"

    def verify(self, cookie: str | None, now: float | None = None) -> Session | None:
        """None for a missing, forged, malformed or expired cookie."""
        if not cookie:
            return None
        payload, _, mac = cookie.rpartition(".")
        if not hmac.compare_digest(mac.encode(), self._mac(payload).encode()):
            return None
        parts = payload.split(".")
        if len(parts) != 4 or parts[0] != _FORMAT:
            return None
        try:
            issued, expires = float(parts[1]), float(parts[2])
        except ValueError:
            return None
        if (now if now is not None else time.time()) >= expires:
            return None
        return Session(parts[3], issued, expires)

    def csrf_token(self, session: Session) -> str:
        return self._mac(f"csrf.{session.nonce}")

    def csrf_matches(self, session: Session, offered: str) -> bool:
        return hmac.compare_digest(offered.encode(), self.csrf_token(session).encode())

    def _mac(self, text: str) -> str:
        digest = hmac.new(self._key, text.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")
