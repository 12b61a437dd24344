"""Builds the configured channels' adapters. The only module that imports every channel;
the daemon calls it, the core never does."""

from __future__ import annotations

from collections.abc import Callable

from gateway_bot.channels.console import ConsoleAdapter
from gateway_bot.channels.email import EmailAdapter
from gateway_bot.channels.matrix import MatrixAdapter
from gateway_bot.channels.slack import SlackAdapter
from gateway_bot.config.server import ServerConfig
from gateway_bot.core.channel import ChannelAdapter
from gateway_bot.state.database import Database


def create_adapters(
    config: ServerConfig, on_console_eof: Callable[[], None], database: Database
) -> dict[str, ChannelAdapter]:
    """``database``: the shared state database, where channels keep their own state
    (opened by the daemon's store before any listener starts)."""
    adapters: dict[str, ChannelAdapter] = {}
    console = config.channels.console
    if console is not None and console.enabled:
        adapters["console"] = ConsoleAdapter(console.conversation, on_eof=on_console_eof)
    slack = config.channels.slack
    if slack is not None and slack.enabled:
        adapters["slack"] = SlackAdapter(slack, config.state_dir, database)
    if config.channels.matrix is not None and config.channels.matrix.enabled:
        adapters["matrix"] = MatrixAdapter(config.channels.matrix, config.state_dir, database)
    email = config.channels.email
    if email is not None and email.enabled:
        adapters["email"] = EmailAdapter(email, database)
    return adapters
