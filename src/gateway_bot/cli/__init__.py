"""Command line: ``chat`` (the console), ``run`` (the daemon), ``check`` (validate a config),
``status`` (what a deployment is doing), ``install-service`` (a systemd user unit),
``approvals`` / ``approve`` / ``deny`` (owners'
decisions from the shell).

Exit codes: 0 done, 2 the config or the set-up is wrong (nothing was started), 3 (``status``)
no state at all for this config.

Each command imports what it uses in its own branch or handler, not at the top: ``--help``
pays for no config model, ``status`` for no daemon, ``chat`` for no podman-py or dashboard
(AGENTS.md, Conventions: heavy libraries are imported where the configuration needs them).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gateway_bot.cli.state import add_state_commands
from gateway_bot.runtime.service_unit import DEFAULT_NAME

if TYPE_CHECKING:
    from gateway_bot.config.server import ServerConfig
    from gateway_bot.runtime.daemon import Daemon

EXIT_CONFIG = 2

USAGE = """\
Work with a coding agent (Claude Code) from chat: the console, Matrix, Slack or email,
each conversation in its own workspace and sandbox.

start here:
  gateway-bot chat                 talk to it in this terminal (built-in config: the git
                                   repo you are in, state in ~/.local/state/gateway-bot)
  gateway-bot check                what chat would run with, and what is missing
a server (copy examples/gateway-bot.yaml from the project and edit it):
  gateway-bot check --config FILE  validate it
  gateway-bot run --config FILE    serve every channel it enables

exit codes: 0 done, 2 the config or the set-up is wrong (nothing was started),
3 (status) no state at all for this config. More: README.md in the project."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gateway-bot",
        description=USAGE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    chat = commands.add_parser("chat", help="talk to the agent from this terminal")
    chat.add_argument("--config", type=Path, help="server config (default: built-in)")
    chat.add_argument("--new", action="store_true", help="start a fresh conversation")
    chat.add_argument("--conversation", default=None, help="console conversation name")
    run = commands.add_parser("run", help="run the daemon with every configured channel")
    run.add_argument("--config", type=Path, required=True)
    check = commands.add_parser("check", help="validate a config and the agent set-up")
    check.add_argument("--config", type=Path, help="server config (default: built-in, chat's)")
    check.add_argument(
        "--sandbox",
        action="store_true",
        help="also run the canary: prove from inside that the sandbox confines the agent",
    )
    status = commands.add_parser(
        "status", help="channels, containers, tasks and approvals of a deployment"
    )
    status.add_argument("--config", type=Path, help="server config (default: built-in)")
    status.add_argument("--json", action="store_true", help="machine-readable, stable keys")
    approvals = commands.add_parser("approvals", help="list approvals waiting for an owner")
    approvals.add_argument("--config", type=Path, help="server config (default: built-in)")
    approvals.add_argument("--json", action="store_true", help="machine-readable")
    for verb, what in (("approve", "allow"), ("deny", "deny")):
        decide = commands.add_parser(
            verb, help=f"{what} a pending approval as an owner (the daemon must be running)"
        )
        decide.add_argument("code", help="the approval's code (gateway-bot approvals)")
        decide.add_argument(
            "--as", dest="owner", required=True, help="the owner or admin identity deciding"
        )
        decide.add_argument("--config", type=Path, help="server config (default: built-in)")
    install = commands.add_parser(
        "install-service", help="write a systemd user unit that runs the daemon for a config"
    )
    install.add_argument("--config", type=Path, required=True)
    install.add_argument(
        "--env-file",
        type=Path,
        help="the unit's EnvironmentFile, for secrets (default: .env beside the config)",
    )
    install.add_argument("--name", default=DEFAULT_NAME, help="unit name (default: %(default)s)")
    install.add_argument(
        "--unit-dir", type=Path, help="where to write it (default: ~/.config/systemd/user)"
    )
    image = commands.add_parser("image", help="build the sandbox images ahead of time")
    image_commands = image.add_subparsers(dest="image_command", required=True)
    build = image_commands.add_parser("build", help="build the agent and proxy images")
    build.add_argument("--config", type=Path, help="server config (default: built-in)")
    build.add_argument("--containerfile", type=Path, help="agent Containerfile to build")
    bootstrap = image_commands.add_parser(
        "bootstrap", help="make the Debian base image with debootstrap (no registry needed)"
    )
    bootstrap.add_argument("--config", type=Path, help="server config (default: built-in)")
    bootstrap.add_argument("--force", action="store_true", help="rebuild it even if present")
    matrix = commands.add_parser("matrix", help="Matrix channel set-up")
    matrix_commands = matrix.add_subparsers(dest="matrix_command", required=True)
    cross_signing = matrix_commands.add_parser(
        "bootstrap-cross-signing",
        help="make the bot's cross-signing keys and print the recovery key once",
    )
    cross_signing.add_argument("--config", type=Path, required=True)
    add_state_commands(commands)
    args = parser.parse_args(argv)
    if args.command == "state":
        from gateway_bot.cli.state import run_state_copy

        return run_state_copy(args.source, args.target, replace=args.replace)
    from gateway_bot.cli.config_source import (
        BUILT_IN,
        built_in_config,
        built_in_dotenv_dir,
        load_config,
    )
    from gateway_bot.config.server import build_server_config

    if args.command == "check":
        from gateway_bot.cli.check import run_check

        return run_check(args.config, canary=args.sandbox)
    if args.command == "image":
        from gateway_bot.cli.image import run_image

        return run_image(args)
    if args.command == "install-service":
        return _install_service(args)
    if args.command == "matrix":
        from gateway_bot.channels.matrix.commands import bootstrap_cross_signing

        matrix_config = load_config(args.config)
        return EXIT_CONFIG if matrix_config is None else bootstrap_cross_signing(matrix_config)
    if args.command in ("status", "approvals", "approve", "deny", "migrate"):
        from gateway_bot.cli.approvals import run_decision, run_list
        from gateway_bot.cli.state import run_migrate
        from gateway_bot.cli.status import run_status

        # Not built_in_config: these only read or ask the daemon, never make the sample repo.
        status_config = (
            load_config(args.config)
            if args.config
            else build_server_config({"repo": {"url": "."}, "channels": {"console": {}}}, BUILT_IN)
        )
        if status_config is None:
            return EXIT_CONFIG
        if args.command == "migrate":
            return run_migrate(status_config.state_target)
        if args.command == "approvals":
            return run_list(
                status_config.state_dir, as_json=args.json, state_url=status_config.state.url
            )
        if args.command in ("approve", "deny"):
            choice = "allow" if args.command == "approve" else "deny"
            return run_decision(status_config.state_dir, args.code, choice, args.owner)
        return run_status(
            status_config.state_dir, as_json=args.json, state_url=status_config.state.url
        )
    from gateway_bot.cli.preflight import (
        DaemonLock,
        local_repo_problem,
        other_repos_state_problem,
        state_dir_problem,
    )
    from gateway_bot.config.channels import ChannelsSettings, ConsoleChannelSettings
    from gateway_bot.runtime.agent_setup import agent_environment, check_agent_setup
    from gateway_bot.runtime.logs import configure_logging

    config = load_config(args.config) if args.config else built_in_config()
    if config is None:
        return EXIT_CONFIG
    if args.command == "chat":
        name = args.conversation or (
            config.channels.console.conversation if config.channels.console else "default"
        )
        # chat talks through the console only, whatever else the config enables.
        config.channels = ChannelsSettings(
            console=ConsoleChannelSettings(enabled=True, conversation=name)
        )
    if (unusable := state_dir_problem(config.state_dir)) is not None:
        print(unusable, file=sys.stderr)
        return EXIT_CONFIG
    lock = DaemonLock(config.state_dir)
    if not config.ha.enabled and (taken := lock.acquire()) is not None:
        print(taken, file=sys.stderr)
        return EXIT_CONFIG
    try:
        level = logging.getLevelNamesMapping()[config.logging.level]
        chatting = args.command == "chat"
        configure_logging(config.logging.format, logging.WARNING if chatting else level)
        config_dir = args.config.parent if args.config else built_in_dotenv_dir()
        agent_env = agent_environment(config, config_dir)
        problem = check_agent_setup(config, agent_env)
        if problem is not None:
            # "in .env": which one, when there is no config file to be beside.
            where = (
                f" (without --config: {config_dir / '.env'})"
                if config_dir and not args.config
                else ""
            )
            print(problem.message + where, file=sys.stderr)
            return EXIT_CONFIG
        if (no_repo := local_repo_problem(config.repo.url)) is not None:
            print(no_repo, file=sys.stderr)  # else every message would fail at its clone
            return EXIT_CONFIG
        how = (
            "state_dir in the config"
            if args.config
            else "GATEWAY_BOT_STATE_DIR=DIR gateway-bot chat"
        )
        if taken_by := other_repos_state_problem(config.state_dir, config.repo.url, how=how):
            print(taken_by, file=sys.stderr)
            return EXIT_CONFIG
        return asyncio.run(
            _serve(
                config,
                agent_env,
                chat=args.command == "chat",
                new=bool(getattr(args, "new", False)),
            )
        )
    finally:
        lock.release()


async def _serve(config: ServerConfig, agent_env: dict[str, str], *, chat: bool, new: bool) -> int:
    from gateway_bot.channels.factory import create_adapters
    from gateway_bot.runtime.daemon import Daemon
    from gateway_bot.sandbox.base import SandboxUnavailable
    from gateway_bot.state.database import Database, StateUnavailable

    holder: list[Daemon] = []

    def on_console_eof() -> None:
        # In chat, end of input means "done". A daemon keeps serving its other channels.
        if chat:
            holder[0].end_of_input.set()

    # shared by the store and the channels' own state
    database = Database(pool_size=config.state.pool_size)
    adapters = create_adapters(config, on_console_eof=on_console_eof, database=database)
    if not adapters:
        print("No channel is enabled in the config: nothing to listen to.", file=sys.stderr)
        return EXIT_CONFIG
    daemon = Daemon(config, adapters, agent_env, database)
    if not chat:
        daemon.serve_control()
    holder.append(daemon)
    try:
        await daemon.open()
    except SandboxUnavailable as exc:
        print(f"The sandbox cannot run: {exc}", file=sys.stderr)
        await daemon.store.close()
        return EXIT_CONFIG
    except StateUnavailable as exc:
        print(f"The state database cannot be used: {exc}", file=sys.stderr)
        await daemon.store.close()
        return EXIT_CONFIG
    if chat:
        console = config.channels.console
        assert console is not None
        # Made now if there is none, so the banner shows the id /status will show.
        conversation = (
            await daemon.service.start_new_conversation("console", console.conversation)
            if new
            else await daemon.store.active_conversation("console", console.conversation)
        ) or await daemon.store.create_conversation("console", console.conversation, None)
        print(
            f"gateway-bot console · conversation {console.conversation} ({conversation.id}) · "
            f"repo {config.repo.url} · /help for commands, Ctrl-D to quit\n"
            f"{await daemon.workspace_reports.location(conversation.id)} · /diff shows the changes",
            flush=True,
        )
    told = asyncio.create_task(_tell_stopping(daemon)) if chat else None
    try:
        await daemon.run()
    finally:
        if told is not None:
            told.cancel()
        if chat:  # the user is gone: leave nothing running (the next chat restarts it)
            await _stop_sandbox(daemon)
        await _end_abandoned_work()
    return 0


async def _end_abandoned_work() -> None:
    """End what shutdown left running (a task past ``shutdown_timeout_seconds``: its agent
    process is killed, the task re-runs at the next start) while the loop still runs, and
    collect its process transports now: collected after ``asyncio.run`` closed the loop,
    each printed an "Exception ignored ... Event loop is closed" traceback at exit."""
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
    gc.collect()


async def _tell_stopping(daemon: Daemon) -> None:
    """Ctrl-D or Ctrl-C at the console: say what happens during the wait, which used to be
    silent (Ctrl-D: until the queue is answered; Ctrl-C: up to
    ``execution.shutdown_timeout_seconds`` for a running task)."""
    stop = asyncio.create_task(daemon.stop_requested.wait())
    eof = asyncio.create_task(daemon.end_of_input.wait())
    try:
        await asyncio.wait({stop, eof}, return_when=asyncio.FIRST_COMPLETED)
        if not stop.done() and not await daemon.service.wait_idle(0.5):
            print(
                "Quitting once the running task (and any queued) is answered; "
                "Ctrl-C to stop sooner.",
                flush=True,
            )
        await stop
    finally:
        stop.cancel()
        eof.cancel()
    wait_s = daemon.config.execution.shutdown_timeout_seconds
    print(
        f"\nStopping: a running task gets up to {wait_s:g} s to finish; one that does not "
        "runs again, from its start, at the next `gateway-bot chat`.",
        flush=True,
    )


async def _stop_sandbox(daemon: Daemon) -> None:
    from gateway_bot.sandbox.base import SandboxUnavailable

    failures: tuple[type[Exception], ...] = (SandboxUnavailable, OSError)
    if daemon.config.sandbox.kind == "podman":  # only then is podman-py imported at all
        from podman.errors import PodmanError

        failures = (*failures, PodmanError)
    try:
        await daemon.sandbox.stop_all()
    except failures as exc:
        print(f"warning: could not stop the sandbox's containers: {exc}", file=sys.stderr)


def _install_service(args: argparse.Namespace) -> int:
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


if __name__ == "__main__":
    sys.exit(main())
