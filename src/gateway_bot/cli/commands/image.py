"""``gateway-bot image build`` / ``image bootstrap``: the sandbox's images made ahead of time
(``cli/image.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gateway_bot.cli.registry import register


def _arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="image_command", required=True)
    build = verbs.add_parser("build", help="build the agent and proxy images")
    build.add_argument("--config", type=Path, help="server config (default: built-in)")
    build.add_argument("--containerfile", type=Path, help="agent Containerfile to build")
    bootstrap = verbs.add_parser(
        "bootstrap", help="make the Debian base image with debootstrap (no registry needed)"
    )
    bootstrap.add_argument("--config", type=Path, help="server config (default: built-in)")
    bootstrap.add_argument("--force", action="store_true", help="rebuild it even if present")


def _run(args: argparse.Namespace) -> int:
    from gateway_bot.cli.image import run_image

    return run_image(args)


register("image", "build the sandbox images ahead of time", _arguments, _run)
