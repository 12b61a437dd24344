"""``gateway-bot chat`` (the console) and ``gateway-bot run`` (the daemon): the checks made
before anything starts, then the daemon served until it is stopped or, for chat, until the
person quits.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gateway_bot.cli.exit_codes import EXIT_CONFIG
from gateway_bot.cli.registry import register

if TYPE_CHECKING:
    from gateway_bot.config.server import ServerConfig
    from gateway_bot.runtime.daemon import Daemon


def _chat_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="server config (default: built-in)")
    parser.add_argument("--new", action="store_true", help="start a fresh conversation")
    parser.add_argument("--conversation", default=None, help="console conversation name")


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, required=True)


def serve(args: argparse.Namespace) -> int:
    """Chat or run: make sure of the state dir, the agent's set-up and the repo, then serve."""
    from gateway_bot.cli.config_source import built_in_config, built_in_dotenv_dir, load_config
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
        with asyncio.Runner() as runner:
            try:
                return runner.run(
                    _serve(
                        config,
                        agent_env,
                        chat=args.command == "chat",
                        new=bool(getattr(args, "new", False)),
                    )
                )
            finally:
                # Process transports kept alive by a cycle (a cancelled task's traceback)
                # are collected while the loop can still run their close: collected after
                # it closed, each printed "Exception ignored ... Event loop is closed".
                gc.unfreeze()  # (what the daemon froze after its start is collected too)
                gc.collect()
                runner.get_loop().run_until_complete(asyncio.sleep(0))
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
    others.clear()  # a cancelled task's traceback holds its process: let it go first
    gc.unfreeze()  # (what the daemon froze after its start is collected too)
    gc.collect()
    await asyncio.sleep(0)  # the collected transports' close runs now


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


register("chat", "talk to the agent from this terminal", _chat_arguments, serve)
register("run", "run the daemon with every configured channel", _run_arguments, serve)
