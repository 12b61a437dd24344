"""``gateway-bot migrate`` and ``gateway-bot state copy``: the state database's commands
(``cli/state.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gateway_bot.cli.exit_codes import EXIT_CONFIG
from gateway_bot.cli.registry import register


def _migrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="server config (default: built-in)")


def _state_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="state_command", required=True)
    copy = verbs.add_parser(
        "copy", help="copy a SQLite state database into another (PostgreSQL), verified"
    )
    copy.add_argument("--from", dest="source", required=True, help="sqlite:///path/state.db")
    copy.add_argument("--to", dest="target", required=True, help="postgresql://... URL")
    copy.add_argument(
        "--replace", action="store_true", help="empty the target's tables first (else refused)"
    )


def _migrate(args: argparse.Namespace) -> int:
    from gateway_bot.cli.config_source import operator_config
    from gateway_bot.cli.state import run_migrate

    config = operator_config(args.config)
    return EXIT_CONFIG if config is None else run_migrate(config.state_target)


def _state(args: argparse.Namespace) -> int:
    from gateway_bot.cli.state import run_state_copy

    return run_state_copy(args.source, args.target, replace=args.replace)


register(
    "migrate",
    "bring the state database's schema up to date, then exit",
    _migrate_arguments,
    _migrate,
)
register("state", "the state database", _state_arguments, _state)
