"""``gateway-bot image build`` / ``image bootstrap``: make the sandbox's images ahead of time.

``build`` builds the agent image (the default Containerfile or a given one, with the
enabled agent CLIs' files) and the egress proxy's; ``bootstrap`` makes the Debian base image with
debootstrap, for hosts that reach no registry. Progress goes to stdout; exit 2 on failure.

Apart from cli/ because only this command and the podman sandbox build images; it is
imported only when ``image`` runs, so no other command pays for the podman modules.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from gateway_bot.cli.config_source import built_in_config, load_config
from gateway_bot.cli.exit_codes import EXIT_CONFIG
from gateway_bot.runtime.agent_setup import agent_image_files
from gateway_bot.sandbox.base import SandboxUnavailable
from gateway_bot.sandbox.podman import commands as image_commands
from gateway_bot.sandbox.podman.cli_call import PodmanCommandError


def run_image(args: argparse.Namespace) -> int:
    """``image build`` / ``image bootstrap``: progress on stdout, exit 2 on failure."""
    config = load_config(args.config) if args.config else built_in_config()
    if config is None:
        return EXIT_CONFIG
    try:
        if args.image_command == "bootstrap":
            asyncio.run(
                image_commands.bootstrap(config.sandbox, config.state_dir, force=args.force)
            )
        else:
            files = agent_image_files(config)
            asyncio.run(
                image_commands.build_images(
                    config.sandbox, config.state_dir, files, args.containerfile
                )
            )
    except (SandboxUnavailable, PodmanCommandError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except OSError as exc:  # a --containerfile (or the config's) that cannot be read
        print(f"error: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return EXIT_CONFIG
    return 0
