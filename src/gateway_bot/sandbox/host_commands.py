"""The host-side commands run on the daemon's own trees: git on its repositories (the
mirror, a clone not yet handed over) and GNU rm for removals. Both run in a session of
their own, so a cancelled call (/stop, shutdown, a task timeout) kills what they started
(``child.reaped``); a failure raises with the command's own words.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

from gateway_bot.sandbox.child import reaped
from gateway_bot.sandbox.context_files import WorkspaceSetupFailed


async def remove_trees(paths: Sequence[Path]) -> None:
    """Delete ``paths`` with GNU rm, which walks iteratively and never follows a link
    (an agent's tree may be thousands of levels deep, where ``shutil.rmtree`` dies of
    recursion), and stays on each path's file system. Raises OSError naming the failure."""
    code, stderr = await run_quietly("rm", "-rf", "--one-file-system", "--", *map(str, paths))
    if code != 0:
        raise OSError(f"removing {', '.join(map(str, paths))} failed: {stderr[-300:]}")


async def run_quietly(*argv: str) -> tuple[int, str]:
    """A host command with no input and no output but its errors: (exit code, stderr).
    In a session of its own, killed with what it started when the caller is cancelled."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    async with reaped(process):
        _, stderr = await process.communicate()
    return process.returncode or 0, stderr.decode(errors="replace")


async def run_git(
    *args: str, error: type[Exception] = WorkspaceSetupFailed, own_config_only: bool = False
) -> str:
    """git on the daemon's own repositories (the mirror, a clone not yet handed over);
    a failure raises ``error`` with git's own message. Cancelled (/stop, shutdown, a task
    timeout), git is killed with what it started (ssh, a remote helper: its own session).
    ``own_config_only``: no system or global git config (see host_files' ``_CHECKOUT_SAFETY``)."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"}
    if own_config_only:
        env |= {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}
    process = await asyncio.create_subprocess_exec(
        "git",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    async with reaped(process):
        stdout, stderr = await process.communicate()
    if process.returncode != 0:
        message = stderr.decode("utf-8", "replace").strip() or f"exit {process.returncode}"
        raise error(f"git {_command_name(args)} failed: {message}")
    return stdout.decode("utf-8", "replace")


def _command_name(args: Sequence[str]) -> str:
    """git's command among its arguments (after ``-C DIR``, ``-c KEY=VALUE``, ``--git-dir=``)."""
    rest = list(args)
    while rest and rest[0].startswith("-"):
        rest = rest[2:] if rest[0] in ("-C", "-c") else rest[1:]
    return rest[0] if rest else "command"
