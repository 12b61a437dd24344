"""UNCONFINED execution: the agent runs as a plain subprocess on the host.

Kept as the opt-in ``sandbox: none`` for development and for hosts without Podman. The agent
can read and write anything the daemon's user can, and its network is not filtered; the
daemon logs a loud warning whenever this sandbox is selected.

What it does guarantee: a run's processes end with the run. Each run is init of its own PID
namespace where the host allows one (the kernel then kills everything left in it when the
run ends or is killed, whatever session or group a process moved to), and carries a token
in its environment; after every run, normal or killed, a sweep of /proc kills whatever
still carries the token (the only mechanism where no PID namespace can be made).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from collections.abc import Mapping, Sequence

from gateway_bot.sandbox.base import ExecutionContext, IsKnown, SandboxContainer, SandboxPaths
from gateway_bot.sandbox.child import (
    RUN_MARK,
    ProcessStdin,
    children_of,
    end_marked_processes,
    kill_group,
    pid_namespace_prefix,
    read_bounded,
    spawn_fed,
)
from gateway_bot.sandbox.host_files import HostContextFiles

log = logging.getLogger(__name__)

_PASSED_THROUGH = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR", "SSL_CERT_FILE")
"""Host variables an agent process needs; everything else it gets is passed explicitly."""


class HostProcess:
    def __init__(self, process: asyncio.subprocess.Process, token: str, isolated: bool) -> None:
        self._process = process
        self._token = token
        self._isolated = isolated
        """Started as ``unshare --pid --fork``: the agent is that process's only child."""
        self._stdin = ProcessStdin(process)
        self._stderr_task = asyncio.create_task(read_bounded(process.stderr))
        self._strays_ended: asyncio.Task[int] | None = None

    @property
    def stdout(self) -> asyncio.StreamReader:
        assert self._process.stdout is not None
        return self._process.stdout

    async def read_stderr(self) -> str:
        return await self._stderr_task

    async def wait(self) -> int:
        """The exit code, once the process and everything it left running have ended: a
        background process the agent started must not outlive its task."""
        code = await self._process.wait()
        self._stdin.close()
        if self._strays_ended is None:
            self._strays_ended = asyncio.create_task(
                asyncio.to_thread(end_marked_processes, self._token)
            )
        if killed := await asyncio.shield(self._strays_ended):
            log.info("ended %d process(es) a finished agent run left behind", killed)
        return code

    def kill(self) -> None:
        kill_group(self._process)

    async def write(self, data: bytes) -> None:
        await self._stdin.write(data)

    def close_stdin(self) -> None:
        self._stdin.close()

    async def end_others(self) -> None:
        """Everything the run started ends but the run itself: its process and, in a PID
        namespace, the namespace's init (the agent, unshare's one child; whatever else
        runs in there descends from it)."""

        def sweep() -> int:
            spared = {self._process.pid}
            if self._isolated:
                spared |= children_of(self._process.pid)
            return end_marked_processes(self._token, spared)

        if killed := await asyncio.to_thread(sweep):
            log.info("ended %d process(es) an agent left running after its turn", killed)


class HostSandbox:
    """Runs argv in the workspace directory, in its own process group and PID namespace."""

    name = "none"

    def __init__(self) -> None:
        self._isolation: list[str] | None = None

    async def _isolation_prefix(self) -> list[str]:
        if self._isolation is None:
            self._isolation = await pid_namespace_prefix()
            if not self._isolation:
                log.warning(
                    "sandbox none: no PID namespace allowed here (unshare --pid failed); "
                    "an agent's leftover processes are found by their environment only"
                )
        return self._isolation

    async def check(self) -> None:
        log.warning(
            "SANDBOX DISABLED (sandbox: none): the agent runs directly on this host with "
            "this user's permissions and unfiltered network access"
        )
        await self._isolation_prefix()

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

    def files(self, context: ExecutionContext) -> HostContextFiles:
        return HostContextFiles.of(context)

    async def start(
        self,
        context: ExecutionContext,
        argv: Sequence[str],
        env: Mapping[str, str],
        stdin_data: bytes = b"",
        *,
        keep_stdin: bool = False,
    ) -> HostProcess:
        full_env = {k: os.environ[k] for k in _PASSED_THROUGH if k in os.environ}
        full_env["HOME"] = str(context.home)
        full_env.update(context.env)
        full_env.update(env)
        token = secrets.token_hex(16)
        full_env[RUN_MARK] = token
        isolation = await self._isolation_prefix()
        command = [*isolation, *argv]
        process = await spawn_fed(
            command,
            env=full_env,
            stdin_data=stdin_data,
            cwd=context.workspace,
            keep_stdin=keep_stdin,
        )
        return HostProcess(process, token, isolated=bool(isolation))

    async def close(self) -> None:
        return None

    async def reach_host_loopback(self, url: str, *, start: bool = True) -> str:
        """The agent runs on the host: its loopback is the host's."""
        return url

    async def list_containers(self) -> list[SandboxContainer]:
        """Nothing outlives a task here."""
        return []

    async def stop_all(self) -> None:
        """Nothing runs between tasks: every run's processes end with it."""
        return None
