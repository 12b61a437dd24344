"""Starting and stopping the host processes every sandbox runs an agent through.

Each is started in its own process group (so a kill reaches everything it spawned) under
``setpriv --pdeathsig KILL`` where available (so if the daemon dies, even by kill -9, the
process dies with it and a restarted daemon never races an orphan of the same task). Its
prompt is written to stdin, which is then closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

STDERR_LIMIT = 64 * 1024
_STDOUT_LINE_LIMIT = 16 * 1024 * 1024
"""One stream-json line can carry a whole file the agent read."""


async def spawn_fed(
    argv: Sequence[str], *, env: Mapping[str, str], stdin_data: bytes, cwd: Path | None = None
) -> asyncio.subprocess.Process:
    command = list(argv)
    setpriv = shutil.which("setpriv")
    if setpriv:
        command = [setpriv, "--pdeathsig", "KILL", "--", *command]
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=cwd,
        env=dict(env),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        limit=_STDOUT_LINE_LIMIT,
    )
    assert process.stdin is not None
    process.stdin.write(stdin_data)
    with contextlib.suppress(ConnectionError):
        await process.stdin.drain()
    process.stdin.close()
    return process


async def read_bounded(stream: asyncio.StreamReader | None) -> str:
    """All of a stream until it ends, keeping the first STDERR_LIMIT bytes."""
    if stream is None:
        return ""
    chunks: list[bytes] = []
    size = 0
    while chunk := await stream.read(4096):
        if size < STDERR_LIMIT:
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks)[:STDERR_LIMIT].decode("utf-8", "replace")


def kill_group(process: asyncio.subprocess.Process) -> None:
    """Kill the process and everything in its group. Safe to call more than once."""
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
