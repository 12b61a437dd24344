"""Files the host writes into a conversation's agent home (the CLI's own settings).

The home is the agent's to write: a link planted there must never send the host's write
elsewhere. Each directory is opened relative to its parent's descriptor with O_NOFOLLOW,
the file is written under a fresh temporary name (O_EXCL) and renamed over the old one,
so a link or a hard link at the final name is replaced, never written through.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


async def write_home_file(home: Path, relative: str, text: str) -> None:
    """Write ``text`` to ``home/relative`` (directories made as needed), never through a
    link the agent left there."""
    await write_home_bytes(home, relative, text.encode("utf-8"))


async def write_home_bytes(home: Path, relative: str, data: bytes) -> None:
    """``write_home_file`` for bytes."""
    await asyncio.to_thread(_write, home, relative, data)


async def make_home_dir(home: Path, relative: str) -> None:
    """Make the directory ``home/relative`` (a CLI that insists its home exists), never
    through a link the agent left there."""
    await asyncio.to_thread(_make_dirs, home, relative.split("/"))


def _open_dirs(home: Path, directories: list[str]) -> int:
    fd = os.open(home, _DIR_FLAGS)
    try:
        for directory in directories:
            with contextlib.suppress(FileExistsError):
                os.mkdir(directory, 0o755, dir_fd=fd)
            child = os.open(directory, _DIR_FLAGS, dir_fd=fd)  # a link here: ELOOP
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _make_dirs(home: Path, directories: list[str]) -> None:
    os.close(_open_dirs(home, directories))


def _write(home: Path, relative: str, data: bytes) -> None:
    *directories, name = relative.split("/")
    fd = _open_dirs(home, directories)
    try:
        temporary = f".{name}.{secrets.token_hex(6)}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        out = os.open(temporary, flags, 0o644, dir_fd=fd)
        with os.fdopen(out, "wb") as handle:
            handle.write(data)
        os.rename(temporary, name, src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        os.close(fd)
