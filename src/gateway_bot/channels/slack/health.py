"""The Slack channel's health as the core sees it (``ChannelListener.status``), with every
change logged once, so an operator reading the daemon's log sees a lost connection, the
retries, and a give-up that needs them."""

from __future__ import annotations

import logging

from gateway_bot.domain.messages import ChannelHealth, ChannelStatus

log = logging.getLogger("gateway_bot.channels.slack")

FATAL_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "not_allowed_token_type",
        "missing_scope",
        "no_permission",
    }
)
"""Web API errors that retrying cannot fix: the channel reports FAILED and stops trying."""


class Health:
    def __init__(self) -> None:
        self.status = ChannelStatus(ChannelHealth.STARTING, "connecting to Slack")

    def set(self, health: ChannelHealth, message: str) -> None:
        if self.status == ChannelStatus(health, message):
            return
        level = logging.INFO if health is ChannelHealth.CONNECTED else logging.WARNING
        if health is ChannelHealth.FAILED:
            level = logging.ERROR
        log.log(level, "slack channel %s: %s", health.value, message)
        self.status = ChannelStatus(health, message)


def backoff_delay(attempt: int, max_delay_s: float) -> float:
    """0.5 s, 1 s, 2 s... up to ``max_delay_s``: quick after a blip, gentle in an outage."""
    return float(min(max_delay_s, 0.5 * 2 ** min(attempt, 16)))
