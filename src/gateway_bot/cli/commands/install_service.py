"""``gateway-bot install-service``: write the systemd user unit that runs the daemon for a
config (the unit itself is ``runtime/service_unit.py``), once ``check`` passes as the unit
would run it."""

from __future__ import annotations

import argparse
import getpass
import os
import subprocess
import sys
from pathlib import Path

from gateway_bot.cli.exit_codes import EXIT_CONFIG
from gateway_bot.cli.registry import register
from gateway_bot.runtime.service_unit import DEFAULT_NAME, UnitSettings


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
    if (refusal := _would_not_start(settings)) is not None:
        print(refusal, file=sys.stderr)
        return EXIT_CONFIG
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


CHECK_TIMEOUT_S = 600
"""``check`` builds nothing; it may start podman's service, seconds on a loaded machine."""


def _would_not_start(settings: UnitSettings) -> str | None:
    """Why the unit would fail at every start, as ``gateway-bot check --strict`` says it when
    run the unit's way (its working directory, this user, its environment only); None when
    it passes."""
    from gateway_bot.runtime.service_unit import unit_environment, working_directory

    directory = working_directory(settings)
    argv = [*settings.program, "check", "--strict", "--config", str(settings.config)]
    try:
        checked = subprocess.run(
            argv, cwd=directory, env=unit_environment(settings), capture_output=True,
            text=True, timeout=CHECK_TIMEOUT_S, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        said, code = f"  {exc}", -1
    else:
        said = "\n".join(
            f"  {line}" for line in (checked.stderr + checked.stdout).splitlines() if line
        )
        code = checked.returncode
    if code == 0:
        return None
    env_file = settings.environment_file
    return (
        "install-service: nothing written: the unit would fail at every start (and restart "
        f"every few seconds). Run as the unit runs it (in {directory}, as "
        f"{getpass.getuser()}, with only the unit's PATH and the variables of "
        f"{env_file}{'' if env_file.is_file() else ', which does not exist'}; nothing "
        f"exported in this shell), `gateway-bot check --strict` says:\n{said}\n"
        "Fix the config (a path it leaves to the current directory, such as an unset "
        "repo.url, is looked for in the config's folder) or put the variables it needs in "
        "the environment file (--env-file), then run install-service again."
    )


register(
    "install-service",
    "write a systemd user unit that runs the daemon for a config",
    _arguments,
    install_service,
)
