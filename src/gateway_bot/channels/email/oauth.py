"""Credentials for IMAP and SMTP: a password, or a Microsoft OAuth2 token (XOAUTH2).

The token comes from msal's client-credentials flow and msal's own cache: each login and
each SMTP send asks for a token, and msal answers from its cache or, when the cached token
expires within five minutes, fetches a new one first. So a token is always refreshed before
it expires, and never fetched more often than needed. Blocking (msal uses requests): called
from the channel's worker threads, like imapclient and smtplib.

Instance discovery is off: the authority is the operator's own setting, and discovery would
call Microsoft's global endpoint even for an authority elsewhere (a sovereign cloud, a
test's stand-in).
"""

from __future__ import annotations

import threading
from typing import Any

import msal

from gateway_bot.config.channels import EmailChannelSettings


class TokenError(Exception):
    """The token endpoint gave no token; ``transient`` when it may give one later."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


class TokenSource:
    def __init__(self, settings: EmailChannelSettings) -> None:
        self._settings = settings
        self._app: Any = None
        self._lock = threading.Lock()

    def bearer(self) -> str:
        settings = self._settings
        with self._lock:
            try:
                if self._app is None:
                    self._app = msal.ConfidentialClientApplication(
                        settings.oauth2_client_id,
                        client_credential=settings.oauth2_client_secret,
                        authority=settings.oauth2_authority,
                        instance_discovery=False,
                    )
                result = self._app.acquire_token_for_client(scopes=settings.oauth2_scopes)
            except (OSError, ValueError) as exc:  # requests' errors are OSErrors
                self._app = None  # discovery failed: try it again next time
                raise TokenError(f"token endpoint unreachable: {exc}", transient=True) from exc
        token = result.get("access_token") if isinstance(result, dict) else None
        if not token:
            error = result.get("error_description") or result.get("error") or result
            raise TokenError(f"no OAuth2 token: {error}", transient=False)
        return str(token)


def xoauth2(user: str, token: str) -> str:
    """The SASL XOAUTH2 initial response (before base64)."""
    return f"user={user}\x01auth=Bearer {token}\x01\x01"
