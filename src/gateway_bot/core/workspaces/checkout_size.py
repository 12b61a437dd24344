"""What a checkout of the repo would write on the host, measured before it is made.

The checkout writes the repo's files on the host before any disk limit is measured, and
git's objects compress well: 20 GB of zeros is 90 MB of pack. So the sizes git records are
added up first (``ls-tree -r -l``, no blob read). The listing itself is hostile input:
trees can share subtrees, so 84 KB of objects can list 10^7 files (820 MB of output) or,
three levels deeper, 10^10. It is therefore read as a stream and git is stopped as soon as
the total passes the limit; every file counts a block (``FILE_BYTES``) besides its size,
so a million empty files is not "0 bytes"; and past ``MAX_FILES`` files the repo is
refused whatever the limit.
"""

from __future__ import annotations

import asyncio
import os

from gateway_bot.sandbox.child import reaped

FILE_BYTES = 4096
"""What one file costs on disk at least (a block), whatever its size."""
MAX_FILES = 2_000_000
_CHUNK = 1 << 20


class CheckoutTooBig(Exception):
    """The checkout would pass the limit: the message says by what."""


async def refuse_checkout_over(git_dir_option: str, ref: str, limit: int) -> None:
    """Raise CheckoutTooBig when checking out ``ref`` would write more than ``limit``
    bytes (or more than ``MAX_FILES`` files); a git failure raises OSError."""
    process = await asyncio.create_subprocess_exec(
        "git", git_dir_option, "ls-tree", "-r", "-l", "-z", "--full-tree", ref,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
        start_new_session=True,
    )  # fmt: skip
    assert process.stdout is not None
    total, files, rest = 0, 0, b""
    async with reaped(process):
        while chunk := await process.stdout.read(_CHUNK):
            entries = (rest + chunk).split(b"\0")
            rest = entries.pop()
            for entry in entries:
                fields = entry.partition(b"\t")[0].split()
                files += 1
                if len(fields) == 4 and fields[1] == b"blob" and fields[3].isdigit():
                    total += int(fields[3])
                total += FILE_BYTES
            if total > limit or files > MAX_FILES:
                process.kill()  # reaped() waits for it
                raise CheckoutTooBig(_too_big(total, files, limit))
        if await process.wait() != 0:
            raise OSError(f"git ls-tree {ref} failed (exit {process.returncode})")


def _too_big(total: int, files: int, limit: int) -> str:
    if files > MAX_FILES:
        return f"the repo has more than {MAX_FILES:,} files: not checked out"
    return (
        f"the repo's files take {total / 1024**2:,.0f} MB or more, past the "
        f"conversation's disk limit of {limit / 1024**2:,.0f} MB: not checked out"
    )
