"""UNCONFINED execution: the agent runs as a plain subprocess on the host.

Kept as the opt-in ``sandbox: none`` for development and for hosts without Podman. The agent
can read and write anything the daemon's user can, and its network is not filtered; the
daemon logs a loud warning whenever this sandbox is selected.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence

from gateway_bot.sandbox.base import ExecutionContext, IsKnown, SandboxPaths
from gateway_bot.sandbox.child import kill_group, read_bounded, spawn_fed

log = logging.getLogger(__name__)

_PASSED_THROUGH = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR", "SSL_CERT_FILE")
"""Host variables an agent process needs; everything else it gets is passed explicitly."""


class HostProcess:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process
        self._stderr_task = asyncio.create_task(read_bounded(process.stderr))

    @property
    def stdout(self) -> asyncio.StreamReader:
        assert self._process.stdout is not None
        return self._process.stdout

    async def read_stderr(self) -> str:
        return await self._stderr_task

    async def wait(self) -> int:
        return await self._process.wait()

    def kill(self) -> None:
        kill_group(self._process)


class HostSandbox:
    """Runs argv in the workspace directory, in its own process group."""

    name = "none"

    async def check(self) -> None:
        log.warning(
            "SANDBOX DISABLED (sandbox: none): the agent runs directly on this host with "
            "this user's permissions and unfiltered network access"
        )

    async def open(self, is_known: IsKnown) -> None:
        return None

    async def discard(self, context_id: str) -> None:
        return None

    def paths(self, context: ExecutionContext) -> SandboxPaths:
        return SandboxPaths(
            workspace=str(context.workspace),
            home=str(context.home),
            inbox=str(context.inbox),
            outbox=str(context.outbox),
            storage=str(context.storage),
        )

    async def start(
        self,
        context: ExecutionContext,
        argv: Sequence[str],
        env: Mapping[str, str],
        stdin_data: bytes = b"",
    ) -> HostProcess:
        full_env = {k: os.environ[k] for k in _PASSED_THROUGH if k in os.environ}
        full_env["HOME"] = str(context.home)
        full_env.update(context.env)
        full_env.update(env)
        process = await spawn_fed(argv, env=full_env, stdin_data=stdin_data, cwd=context.workspace)
        return HostProcess(process)

    async def close(self) -> None:
        return None
