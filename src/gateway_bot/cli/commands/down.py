"""``gateway-bot down``: stop (``--remove``: remove) a deployment's agent containers and
egress proxy, which ``run`` leaves running (``sandbox/podman/teardown.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gateway_bot.cli.registry import register


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="server config (default: built-in, chat's)")
    parser.add_argument(
        "--remove",
        action="store_true",
        help="remove the containers and the conversations' networks instead of stopping them "
        "(the next start makes them again; workspaces and sessions stay)",
    )


def _run(args: argparse.Namespace) -> int:
    from gateway_bot.cli.config_source import operator_config
    from gateway_bot.cli.down import run_down
    from gateway_bot.cli.exit_codes import EXIT_CONFIG

    config = operator_config(args.config)
    if config is None:
        return EXIT_CONFIG
    return run_down(config, remove=args.remove)


register(
    "down",
    "stop (or --remove) a deployment's containers and egress proxy; never another's",
    _arguments,
    _run,
)
