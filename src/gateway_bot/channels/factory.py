"""Builds the configured channels' adapters. The only module that imports every channel;
the daemon calls it, the core never does."""

from __future__ import annotations

from collections.abc import Callable

from gateway_bot.channels.console import ConsoleAdapter
from gateway_bot.channels.matrix import MatrixAdapter
from gateway_bot.channels.slack import SlackAdapter
from gateway_bot.config.server import ServerConfig
from gateway_bot.core.channel import ChannelAdapter


def create_adapters(
    config: ServerConfig, on_console_eof: Callable[[], None]
) -> dict[str, ChannelAdapter]:
    adapters: dict[str, ChannelAdapter] = {}
    console = config.channels.console
    if console is not None and console.enabled:
        adapters["console"] = ConsoleAdapter(console.conversation, on_eof=on_console_eof)
    slack = config.channels.slack
    if slack is not None and slack.enabled:
        adapters["slack"] = SlackAdapter(slack, config.state_dir)
    if config.channels.matrix is not None:
        adapters["matrix"] = MatrixAdapter(config.channels.matrix, config.state_dir)
    return adapters
