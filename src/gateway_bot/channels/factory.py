"""Builds the configured channels' adapters. The only module that imports every channel;
the daemon calls it, the core never does. Each channel is imported only when configured:
matrix-nio, slack-sdk and the mail libraries take seconds to import, and every start of the
daemon (a crash's restart, ``chat``) would pay for channels it does not run."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gateway_bot.config.server import ServerConfig
from gateway_bot.core.channel import ChannelAdapter
from gateway_bot.state.database import Database, Migration


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


def channel_owners() -> dict[str, Sequence[Migration]]:
    """Every channel's tables in the state database, by owner, with their migrations (for
    ``gateway-bot migrate`` and ``state copy``, which serve every channel a database may
    hold, configured or not)."""
    from gateway_bot.channels.email.store import EMAIL_MIGRATIONS
    from gateway_bot.channels.email.store import OWNER as EMAIL
    from gateway_bot.channels.matrix.store import MATRIX_MIGRATIONS
    from gateway_bot.channels.matrix.store import OWNER as MATRIX
    from gateway_bot.channels.matrix.undecrypted import MIGRATIONS as MATRIX_E2EE_MIGRATIONS
    from gateway_bot.channels.matrix.undecrypted import OWNER as MATRIX_E2EE
    from gateway_bot.channels.slack.records import OWNER as SLACK
    from gateway_bot.channels.slack.records import SLACK_MIGRATIONS

    return {
        MATRIX: MATRIX_MIGRATIONS,
        MATRIX_E2EE: MATRIX_E2EE_MIGRATIONS,
        SLACK: SLACK_MIGRATIONS,
        EMAIL: EMAIL_MIGRATIONS,
    }
