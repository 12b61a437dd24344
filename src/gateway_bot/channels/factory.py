"""Builds the configured channels' adapters. The only module that imports every channel;
the daemon calls it, the core never does. Each channel is imported only when configured:
matrix-nio, slack-sdk and the mail libraries take seconds to import, and every start of the
daemon (a crash's restart, ``chat``) would pay for channels it does not run."""

from __future__ import annotations

from collections.abc import Callable

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
        from gateway_bot.channels.console import ConsoleAdapter

        adapters["console"] = ConsoleAdapter(console.conversation, on_eof=on_console_eof)
    slack = config.channels.slack
    if slack is not None and slack.enabled:
        from gateway_bot.channels.slack import SlackAdapter

        adapters["slack"] = SlackAdapter(slack, config.state_dir, database)
    if config.channels.matrix is not None and config.channels.matrix.enabled:
        from gateway_bot.channels.matrix import MatrixAdapter

        adapters["matrix"] = MatrixAdapter(config.channels.matrix, config.state_dir, database)
    email = config.channels.email
    if email is not None and email.enabled:
        from gateway_bot.channels.email import EmailAdapter

        adapters["email"] = EmailAdapter(email, database)
    return adapters
