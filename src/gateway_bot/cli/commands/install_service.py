"""``gateway-bot install-service``: write the systemd user unit that runs the daemon for a
config (the unit itself is ``runtime/service_unit.py``)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gateway_bot.cli.exit_codes import EXIT_CONFIG
from gateway_bot.cli.registry import register
from gateway_bot.runtime.service_unit import DEFAULT_NAME


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument(
        "--env-file",
        type=Path,
        help="the unit's EnvironmentFile, for secrets (default: .env beside the config)",
    )
    parser.add_argument("--name", default=DEFAULT_NAME, help="unit name (default: %(default)s)")
    parser.add_argument(
        "--unit-dir", type=Path, help="where to write it (default: ~/.config/systemd/user)"
    )


def install_service(args: argparse.Namespace) -> int:
    from gateway_bot.cli.config_source import load_config
    from gateway_bot.runtime.service_unit import (
        UnitSettings,
        UnsafeUnitValue,
        default_unit_dir,
        install_unit,
        instructions,
        this_program,
        valid_unit_name,
    )

    config = load_config(args.config)
    if config is None:
        return EXIT_CONFIG
    if not valid_unit_name(args.name):
        print(f"{args.name!r} is not a unit name: letters, digits, . _ -", file=sys.stderr)
        return EXIT_CONFIG
    config_path = args.config.resolve()
    settings = UnitSettings(
        config=config_path,
        environment_file=(args.env_file or config_path.parent / ".env").resolve(),
        program=this_program(),
        path_variable=os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        shutdown_timeout_s=config.execution.shutdown_timeout_seconds,
    )
    try:
        unit = install_unit(settings, args.unit_dir or default_unit_dir(), args.name)
    except UnsafeUnitValue as exc:
        print(f"install-service: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except OSError as exc:
        print(f"install-service: cannot write the unit: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    print(instructions(unit, args.name))
    return 0


register(
    "install-service",
    "write a systemd user unit that runs the daemon for a config",
    _arguments,
    install_service,
)
