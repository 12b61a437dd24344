"""One task's process in a container: a ``podman exec -i`` CLI process on the host.

Used for hosts whose service is reached over ``ssh://`` (``podman --remote exec``); a
service on this machine's unix socket runs the task itself (``api_exec.py``, no CLI
start-up per task), with this class's interface.

The CLI carries stdin and stdout (podman-py cannot feed an exec's stdin): what is written to
the CLI's stdin reaches the process in the container as it comes, and closing it is the
process's end of file (a warm agent session reads turn after turn). Killing the CLI
does not kill what it started inside the container, so ``kill`` also clears the container
(everything but PID 1 belongs to this task). The CLI runs under ``setpriv --pdeathsig KILL``:
if the daemon dies, the CLI dies with it, and the next daemon's ``open`` clears the
container before the interrupted task is run again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from gateway_bot.sandbox.child import ProcessStdin, kill_group, read_bounded, spawn_fed

AfterExit = Callable[[int, bool], Awaitable[str]]
"""Called once when the CLI has exited, with its exit code and whether it was killed;
returns a note for stderr (why a container went away) or ''."""

EndOthers = Callable[[], Awaitable[None]]
"""Ends every process of the container but its init and this exec's own process."""


async def start_cli_exec(
    command: list[str],
    env: dict[str, str],
    stdin_data: bytes,
    keep_stdin: bool,
    after_exit: AfterExit,
    end_others: EndOthers,
) -> PodmanExecProcess:
    """Run ``command`` (a ``podman --remote exec -i ...``) with the host CLI's ``env``.
    The exec's own variables travel in an ``--env-file``: never in that environment (a
    repo's container_env would configure the host's podman) nor in argv."""
    process = await spawn_fed(command, env=env, stdin_data=stdin_data, keep_stdin=keep_stdin)
    return PodmanExecProcess(process, after_exit, end_others)


class PodmanExecProcess:
    def __init__(
        self, process: asyncio.subprocess.Process, after_exit: AfterExit, end_others: EndOthers
    ) -> None:
        self._process = process
        self._after_exit = after_exit
        self._end_others = end_others
        self._killed = False
        self._stdin = ProcessStdin(process)
        self._stderr_task = asyncio.create_task(read_bounded(process.stderr))
        self._exit: asyncio.Task[int] | None = None
        self._note = ""

    @property
    def stdout(self) -> asyncio.StreamReader:
        assert self._process.stdout is not None
        return self._process.stdout

    async def read_stderr(self) -> str:
        text = await self._stderr_task
        await self.wait()
        return f"{text.rstrip()}\n{self._note}" if self._note else text

    async def wait(self) -> int:
        if self._exit is None:
            self._exit = asyncio.create_task(self._finish())
        return await asyncio.shield(self._exit)

    async def _finish(self) -> int:
        code = await self._process.wait()
        self._stdin.close()
        self._note = await self._after_exit(code, self._killed)
        return code

    def kill(self) -> None:
        self._killed = True
        kill_group(self._process)

    async def write(self, data: bytes) -> None:
        await self._stdin.write(data)

    def close_stdin(self) -> None:
        self._stdin.close()

    async def end_others(self) -> None:
        await self._end_others()
