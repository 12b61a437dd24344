"""One podman CLI command, run as a process of the daemon (an argv list, never a shell):
its output collected, or passed on line by line as it comes (build progress); killed when
its timeout passes or its caller is cancelled; a non-zero exit is a PodmanCommandError that
carries podman's last words.

Split from ``service.py``, which decides which podman runs (its argv start for the host:
local storage flags or ``--remote --url``) and with what environment; this module only runs
the process and reads what it says.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from gateway_bot.sandbox.child import reaped

OnLine = Callable[[str], Awaitable[None]]


class PodmanCommandError(Exception):
    """A podman CLI command failed; the message has its argv and podman's last words."""


@dataclass(frozen=True)
class CliResult:
    returncode: int
    stdout: str
    stderr: str


async def run_cli(
    prefix: Sequence[str],
    args: Sequence[str],
    env: Mapping[str, str],
    *,
    on_line: OnLine | None = None,
    timeout_s: float | None = None,
    check: bool = True,
) -> CliResult:
    """Run ``PREFIX ARGS`` (``prefix``: the podman executable and its global flags) with
    exactly ``env``; with ``on_line`` every output line is passed on as it comes. Raises
    PodmanCommandError, naming ``args``, on a non-zero exit when ``check``."""
    process = await asyncio.create_subprocess_exec(
        *prefix,
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT if on_line else asyncio.subprocess.PIPE,
        env=env,
    )
    async with reaped(process), asyncio.timeout(timeout_s):
        if on_line is None:
            out, err = await process.communicate()
        else:
            out, err = await _follow(process, on_line), b""
            await process.wait()
    result = CliResult(
        process.returncode or 0,
        out.decode("utf-8", "replace"),
        (err or b"").decode("utf-8", "replace"),
    )
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise PodmanCommandError(
            f"`podman {' '.join(_short(args))}` failed (exit {result.returncode}): {detail[0]}"
        )
    return result


async def _follow(process: asyncio.subprocess.Process, on_line: OnLine) -> bytes:
    assert process.stdout is not None
    collected: list[bytes] = []
    async for raw in process.stdout:
        collected.append(raw)
        await on_line(raw.decode("utf-8", "replace").rstrip("\n"))
    return b"".join(collected[-50:])


def _short(args: Sequence[str]) -> list[str]:
    return [arg if len(arg) < 80 else arg[:77] + "..." for arg in args[:8]]
