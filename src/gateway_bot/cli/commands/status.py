"""``gateway-bot status``: channels, containers, tasks and approvals of a deployment
(``cli/status.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gateway_bot.cli.exit_codes import EXIT_CONFIG
from gateway_bot.cli.registry import register


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="server config (default: built-in)")
    parser.add_argument("--json", action="store_true", help="machine-readable, stable keys")


def _run(args: argparse.Namespace) -> int:
    from gateway_bot.cli.config_source import operator_config
    from gateway_bot.cli.status import run_status

    config = operator_config(args.config)
    if config is None:
        return EXIT_CONFIG
    return run_status(config.state_dir, as_json=args.json, state_url=config.state.url)


register("status", "channels, containers, tasks and approvals of a deployment", _arguments, _run)
