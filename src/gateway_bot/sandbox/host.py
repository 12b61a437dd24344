"""UNCONFINED execution: the agent runs as a plain subprocess on the host.

Kept as the opt-in ``sandbox: none`` for development and for hosts without Podman. The agent
can read and write anything the daemon's user can, and its network is not filtered; the
daemon logs a loud warning whenever this sandbox is selected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
from collections.abc import Mapping, Sequence

from gateway_bot.sandbox.base import ExecutionContext, IsKnown, SandboxPaths

log = logging.getLogger(__name__)

_STDERR_LIMIT = 64 * 1024
_PASSED_THROUGH = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR", "SSL_CERT_FILE")
"""Host variables an agent process needs; everything else it gets is passed explicitly."""


class HostProcess:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process
        self._stderr_task = asyncio.create_task(self._collect_stderr())

    @property
    def stdout(self) -> asyncio.StreamReader:
        assert self._process.stdout is not None
        return self._process.stdout

    async def _collect_stderr(self) -> str:
        assert self._process.stderr is not None
        chunks: list[bytes] = []
        size = 0
        while chunk := await self._process.stderr.read(4096):
            if size < _STDERR_LIMIT:
                chunks.append(chunk)
                size += len(chunk)
        return b"".join(chunks)[:_STDERR_LIMIT].decode("utf-8", "replace")

    async def read_stderr(self) -> str:
        return await self._stderr_task

    async def wait(self) -> int:
        return await self._process.wait()

    def kill(self) -> None:
        if self._process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signal.SIGKILL)


class HostSandbox:
    """Runs argv in the workspace directory, in its own process group."""

    name = "none"

    def __init__(self) -> None:
        self._setpriv = shutil.which("setpriv")

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
        command = list(argv)
        if self._setpriv:
            # If the daemon dies (even by kill -9) the agent dies with it, so a restarted
            # daemon never races an orphaned run of the same task.
            command = [self._setpriv, "--pdeathsig", "KILL", "--", *command]
        process = await asyncio.create_subprocess_exec(
            *command,
            cwd=context.workspace,
            env=full_env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            limit=16 * 1024 * 1024,
        )
        assert process.stdin is not None
        process.stdin.write(stdin_data)
        with contextlib.suppress(ConnectionError):
            await process.stdin.drain()
        process.stdin.close()
        return HostProcess(process)

    async def close(self) -> None:
        return None
