"""``gateway-bot approvals`` (what waits for an owner) and ``approve`` / ``deny CODE`` (an
owner's decision from the shell, through the running daemon): ``cli/approvals.py``."""

from __future__ import annotations

import argparse
from pathlib import Path

from gateway_bot.cli.exit_codes import EXIT_CONFIG
from gateway_bot.cli.registry import register


def _list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="server config (default: built-in)")
    parser.add_argument("--json", action="store_true", help="machine-readable")


def _decision_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("code", help="the approval's code (gateway-bot approvals)")
    parser.add_argument(
        "--as", dest="owner", required=True, help="the owner or admin identity deciding"
    )
    parser.add_argument("--config", type=Path, help="server config (default: built-in)")


def _list(args: argparse.Namespace) -> int:
    from gateway_bot.cli.approvals import run_list
    from gateway_bot.cli.config_source import operator_config

    config = operator_config(args.config)
    if config is None:
        return EXIT_CONFIG
    return run_list(config.state_dir, as_json=args.json, state_url=config.state.url)


def _decide(args: argparse.Namespace) -> int:
    from gateway_bot.cli.approvals import run_decision
    from gateway_bot.cli.config_source import operator_config

    config = operator_config(args.config)
    if config is None:
        return EXIT_CONFIG
    choice = "allow" if args.command == "approve" else "deny"
    return run_decision(config.state_dir, args.code, choice, args.owner)


register("approvals", "list approvals waiting for an owner", _list_arguments, _list)
for _verb, _what in (("approve", "allow"), ("deny", "deny")):
    register(
        _verb,
        f"{_what} a pending approval as an owner (the daemon must be running)",
        _decision_arguments,
        _decide,
    )
