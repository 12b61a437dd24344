"""``gateway-bot check``: validate a config and the set-up it needs (``cli/check.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gateway_bot.cli.registry import register


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="server config (default: built-in, chat's)")
    parser.add_argument(
        "--sandbox",
        action="store_true",
        help="also run the canary: prove from inside that the sandbox confines the agent",
    )


def _run(args: argparse.Namespace) -> int:
    from gateway_bot.cli.check import run_check

    return run_check(args.config, canary=args.sandbox)


register("check", "validate a config and the agent set-up", _arguments, _run)
