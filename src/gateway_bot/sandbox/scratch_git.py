"""git on a scratch repository the daemon made (for /diff), with nothing configurable.

The scratch repository holds the agent's objects, so git is still parsing hostile data:
it runs with a fixed environment (PATH only from the daemon's; no system or global config,
no GIT_* variables), settings that would run programs or write back forced off on the
command line, no pager, and a cap on how much output is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
from pathlib import Path

from gateway_bot.sandbox.child import reaped

MAX_OUTPUT_BYTES = 32 * 1024 * 1024
MAX_ADDRESS_SPACE = 3 * 1024 * 1024 * 1024
"""git's address space (``prlimit --as``): it reads an added or deleted file's blob whole,
whatever its size (``bigFileThreshold`` or not), and the agent's commit of a 4 GB file of
zeros is 18 MB of objects. Packs are mapped in windows git gives back when refused."""

_FORCED = (
    # Diffed as binary past this size: xdiff keeps some 40 bytes per line it compares, and a
    # commit of 500 MB of line breaks (a few hundred KB of objects, nothing of the disk
    # limit) took 20 GB of the host's memory. The working tree's side is cut at 8 MB too.
    "core.bigFileThreshold=8m",
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.attributesFile=/dev/null",
    "core.quotePath=false",
    "diff.external=",
    "gc.auto=0",
    "maintenance.auto=false",
)
_SAFETY = tuple(arg for setting in _FORCED for arg in ("-c", setting))


class ScratchGitError(Exception):
    """git failed on the scratch repository; the message carries git's last line."""


class ScratchGit:
    def __init__(self) -> None:
        self._git = shutil.which("git") or "git"
        prlimit = shutil.which("prlimit")  # util-linux, as setpriv and unshare
        self._limit = [prlimit, f"--as={address_space_cap()}:", "--"] if prlimit else []

    async def text(
        self,
        repository: Path | None,
        *args: str,
        stdin: bytes | None = None,
        env: dict[str, str] | None = None,
    ) -> str:
        raw = await self.run(repository, *args, stdin=stdin, env=env)
        return raw.decode("utf-8", "replace")

    async def run(
        self,
        repository: Path | None,
        *args: str,
        stdin: bytes | None = None,
        env: dict[str, str] | None = None,
    ) -> bytes:
        """``git --git-dir=REPOSITORY ARGS``'s stdout; ScratchGitError when it fails."""
        argv = [*self._limit, self._git, "--no-pager", *_SAFETY]
        if repository is not None:
            argv.append(f"--git-dir={repository}")
        process = await asyncio.create_subprocess_exec(
            *argv,
            *args,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**_fixed_env(repository or Path("/nonexistent")), **(env or {})},
            cwd=str(repository.parent) if repository is not None else "/",
            start_new_session=True,
        )
        async with reaped(process):
            stdout, stderr = await _communicate_capped(process, stdin)
        if process.returncode != 0:
            last = stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["failed"]
            raise ScratchGitError(f"git {args[0]}: {last[0]}")
        return stdout


def address_space_cap() -> int:
    """The soft limit git gets: MAX_ADDRESS_SPACE, or the daemon's hard limit when that is
    lower (systemd's ``LimitAS=``, ``ulimit -v``). Only the soft limit is set (``--as=N:``
    keeps the hard one): raising a hard limit is refused without CAP_SYS_RESOURCE (EPERM),
    which made every /diff fail on such a host."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard == resource.RLIM_INFINITY:
        return MAX_ADDRESS_SPACE
    return min(MAX_ADDRESS_SPACE, hard)


def _fixed_env(home: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
    }


async def _communicate_capped(
    process: asyncio.subprocess.Process, stdin: bytes | None
) -> tuple[bytes, bytes]:
    """Like communicate(), but stdout stops at MAX_OUTPUT_BYTES (then the process is
    killed and ScratchGitError raised)."""
    assert process.stdout is not None
    assert process.stderr is not None

    async def feed() -> None:
        if stdin is None or process.stdin is None:
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            process.stdin.write(stdin)
            await process.stdin.drain()
        process.stdin.close()

    async def read_out() -> bytes:
        assert process.stdout is not None
        chunks: list[bytes] = []
        size = 0
        while chunk := await process.stdout.read(1024 * 1024):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_OUTPUT_BYTES:
                process.kill()
                limit = MAX_OUTPUT_BYTES // (1024 * 1024)
                raise ScratchGitError(f"more than {limit} MB of output")
        return b"".join(chunks)

    async def read_err() -> bytes:
        assert process.stderr is not None
        kept = b""
        while chunk := await process.stderr.read(65536):
            kept = (kept + chunk)[-65536:]
        return kept

    _, stdout, stderr = await asyncio.gather(feed(), read_out(), read_err())
    await process.wait()
    return stdout, stderr
