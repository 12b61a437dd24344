"""A command in a context's container whose output the daemon reads, bounded: the daemon's
own work there (a clone, /diff's git) on a host that does not share its disk (decision 0130).

Everything in the container is the agent's, its ``git`` and ``sh`` included, so what comes
back is data from the agent: at most ``limit`` bytes of it are read (the command is killed
past that), and its exit status and words are reported, never acted on. Through the podman
CLI (``--remote`` for an ssh:// host), as the sandbox's other execs: podman 4.3's REST exec
leaves a conmon behind (``ContainerCalls.exec_quietly``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gateway_bot.sandbox.child import reaped
from gateway_bot.sandbox.podman.service import PodmanService

_CHUNK = 64 * 1024
_MAX_ERROR_BYTES = 16 * 1024


@dataclass(frozen=True)
class ExecOutput:
    code: int
    out: bytes
    cut: bool
    """More came than ``limit``: the command was killed and ``out`` is its start."""
    error: str
    """The end of what it wrote to stderr (podman's words when podman failed)."""


async def exec_bounded(
    service: PodmanService,
    container: str,
    argv: Sequence[str],
    *,
    limit: int,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 300,
) -> ExecOutput:
    """Run ``argv`` in ``container`` (running) and read at most ``limit`` bytes of its
    output. Raises TimeoutError past ``timeout_s`` (the command killed)."""
    args = ["exec", *(f"--env={k}={v}" for k, v in (env or {}).items()), container, *argv]
    process = await asyncio.create_subprocess_exec(
        *await service.cli_prefix(),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=service.cli_env(),
        start_new_session=True,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    stdout, stderr = process.stdout, process.stderr

    async def read_out() -> tuple[bytes, bool]:
        parts: list[bytes] = []
        size = 0
        while chunk := await stdout.read(_CHUNK):
            parts.append(chunk)
            size += len(chunk)
            if size > limit:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                return b"".join(parts)[:limit], True
        return b"".join(parts), False

    async def read_error() -> bytes:
        kept = b""
        while chunk := await stderr.read(_CHUNK):
            kept = (kept + chunk)[-_MAX_ERROR_BYTES:]
        return kept

    async with reaped(process), asyncio.timeout(timeout_s):
        (out, cut), error = await asyncio.gather(read_out(), read_error())
        code = await process.wait()
    return ExecOutput(code, out, cut, error.decode("utf-8", "replace").strip())
