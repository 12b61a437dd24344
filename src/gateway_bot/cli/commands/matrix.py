"""``gateway-bot matrix bootstrap-cross-signing``: the Matrix channel's set-up from the shell
(``channels/matrix/commands.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gateway_bot.cli.exit_codes import EXIT_CONFIG
from gateway_bot.cli.registry import register


def _arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="matrix_command", required=True)
    cross_signing = verbs.add_parser(
        "bootstrap-cross-signing",
        help="make the bot's cross-signing keys and print the recovery key once",
    )
    cross_signing.add_argument("--config", type=Path, required=True)


def _run(args: argparse.Namespace) -> int:
    from gateway_bot.channels.matrix.commands import bootstrap_cross_signing
    from gateway_bot.cli.config_source import load_config

    config = load_config(args.config)
    return EXIT_CONFIG if config is None else bootstrap_cross_signing(config)


register("matrix", "Matrix channel set-up", _arguments, _run)
