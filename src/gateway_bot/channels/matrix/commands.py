"""The Matrix channel's command-line parts: the encryption lines ``check`` prints, and
``gateway-bot matrix bootstrap-cross-signing``. Kept out of ``cli/`` so the CLI stays a
dispatcher; both open the deployment's state database, never a new device."""

from __future__ import annotations

import asyncio
import sys

from gateway_bot.config.server import ServerConfig
from gateway_bot.state.database import Database


async def _with_session(config: ServerConfig, bootstrap: bool) -> list[str]:
    # Imported here: the CLI imports this module at every start, and matrix-nio alone takes
    # seconds to import (see channels/factory.py).
    from gateway_bot.channels.matrix.session import MatrixSession

    settings = config.channels.matrix
    assert settings is not None
    await asyncio.to_thread(config.state_dir.mkdir, parents=True, exist_ok=True)
    database = Database()
    await database.open(config.state_target)
    try:
        session = MatrixSession(settings, config.state_dir, database)
        if bootstrap:
            return [await session.bootstrap_cross_signing()]
        return await session.describe_e2ee()
    finally:
        await database.close()


def describe_e2ee(config: ServerConfig) -> list[str]:
    """``check``'s lines about Matrix encryption; [] when Matrix is not configured."""
    settings = config.channels.matrix
    if settings is None or not settings.enabled:
        return []
    try:
        return asyncio.run(_with_session(config, bootstrap=False))
    except Exception as exc:  # a check reports, it does not crash
        return [f"matrix e2ee: could not be checked: {exc}"]


def bootstrap_cross_signing(config: ServerConfig) -> int:
    """Make the bot account's cross-signing keys and print the recovery key, once."""
    if config.channels.matrix is None:
        print("error: no matrix channel in this config", file=sys.stderr)
        return 2
    recovery_key = asyncio.run(_with_session(config, bootstrap=True))[0]
    print("Cross-signing keys made and stored in secret storage. The recovery key (shown once;")
    print("put it in matrix.e2ee.recovery_key via !env to have the bot sign its device):")
    print(recovery_key)
    return 0
