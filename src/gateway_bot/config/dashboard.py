"""The web dashboard's settings (the ``dashboard:`` section of the server config).

Its own module so the dashboard package reads its settings without the server config's
loader (pydantic-settings, .env, YAML tags), and the rule that keeps the login off the
network in clear text stands beside the keys it is about.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, PositiveFloat, model_validator

from gateway_bot.config.section import Section


class DashboardSettings(Section):
    """The web dashboard ``gateway-bot run`` serves (``gateway_bot/dashboard``). Never open:
    a login with ``token`` is always required. Off loopback it must be TLS or behind a proxy
    the operator says terminates TLS, so the token and the session cookie never cross a
    network in the clear."""

    enabled: bool = True
    host: str = Field(default="127.0.0.1", min_length=1)
    port: int = Field(default=8950, ge=0, le=65535, description="0: any free port (logged).")
    token: str = Field(
        min_length=16, repr=False, description="The login token (use !env; 16+ characters)."
    )
    behind_proxy: bool = Field(
        default=False,
        description="A reverse proxy terminates TLS in front: allows a non-loopback host "
        "and marks the session cookie Secure.",
    )
    tls_certificate: Path | None = None
    tls_key: Path | None = None
    operator: dict[str, str] = Field(
        default_factory=dict,
        description="Per channel, the owner identity a dashboard approval decision is "
        "recorded as (must be in access.owners or access.admins of that channel).",
    )
    session_hours: PositiveFloat = Field(
        default=12.0, description="How long a login lasts before the token is asked again."
    )
    session_idle_minutes: PositiveFloat = Field(
        default=60.0,
        description="A login nobody used for this long ends (an open tasks page counts as use).",
    )
    metrics_token: str | None = Field(
        default=None,
        min_length=16,
        repr=False,
        description="A bearer token that reads /metrics without a login (use !env; 16+ "
        "characters). Without it only loopback scrapers (and logged-in browsers) read it.",
    )
    public_url: str | None = Field(
        default=None,
        pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$",
        description="The dashboard's address as people reach it (e.g. "
        "https://bot.example.org/dash): acknowledgements in chat then link to the "
        "conversation's page there.",
    )

    def conversation_url(self, conversation_id: str) -> str | None:
        """The conversation's page at ``public_url``; None without one."""
        if self.public_url is None:
            return None
        return f"{self.public_url.rstrip('/')}/conversations/{conversation_id}"

    @model_validator(mode="after")
    def _exposed_only_safely(self) -> DashboardSettings:
        if (self.tls_certificate is None) != (self.tls_key is None):
            raise ValueError("set both tls_certificate and tls_key, or neither")
        tls = self.tls_certificate is not None
        if self.enabled and not _loopback_host(self.host) and not tls and not self.behind_proxy:
            raise ValueError(
                f"host {self.host!r} is not loopback and the dashboard would serve its login "
                "in clear text: set tls_certificate and tls_key, or behind_proxy: true when a "
                "TLS-terminating proxy is in front, or keep host 127.0.0.1"
            )
        return self

    def served_names(self) -> frozenset[str]:
        """The host names a request's ``Host`` may carry besides loopback addresses: the
        configured host and the public URL's (lower case, IPv6 without brackets)."""
        names = {"localhost", self.host.strip("[]").lower()}
        if self.public_url is not None and (public := urlsplit(self.public_url).hostname):
            names.add(public)
        return frozenset(names)

    def serves_every_address(self) -> bool:
        """Bound to a wildcard address: reached by any of the machine's addresses."""
        return self.host.strip("[]") in ("0.0.0.0", "::", "")


WEAK_TOKEN_GUESSES_LOG10 = 14.0
"""Below about 10^14 guesses (~46 bits), a token falls to a patient search; a random
16-character one scores 16. zxcvbn's estimate counts dictionary words, dates, repeats
and keyboard walks, which a length rule does not see (``aaaaaaaaaaaaaaaa`` is 16 long)."""


def token_weakness(token: str) -> str | None:
    """Why ``token`` is easy to guess, or None when it is not (``check`` warns with it)."""
    from zxcvbn import zxcvbn  # ~30 ms of word lists: only when asked

    found = zxcvbn(token)
    guesses = float(found["guesses_log10"])
    if guesses >= WEAK_TOKEN_GUESSES_LOG10:
        return None
    advice = " ".join(str(line) for line in found["feedback"]["suggestions"])
    return (
        f"the dashboard token is guessable in about 10^{guesses:.0f} tries "
        f"(wanted 10^{WEAK_TOKEN_GUESSES_LOG10:.0f} or more){': ' + advice if advice else ''}"
        " Use a random one, e.g. `python3 -c 'import secrets; print(secrets.token_urlsafe(24))'`."
    )


def _loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
