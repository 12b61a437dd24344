"""Files that arrive from chat, on their way into a conversation's inbox.

Two kinds of hostility meet here. A sender chooses the name, so it is sanitised: no
directories (no ``../``), no leading dots, a bounded length. And the inbox is mounted into
the agent's sandbox, so the agent can leave anything there: a symlink named like the next
upload (``report.txt -> /etc/cron.d/x``) or a directory where a file is expected. The
daemon runs as root, so it must never write *through* a path the agent controls.

``InboxWriter`` therefore never opens a file in the inbox at all. A download is written
into ``incoming/`` beside the inbox, a directory of the conversation the sandbox never
mounts, with an exclusive no-follow open. It is then published into the inbox by the
sandbox (``ContextFiles.put_inbox``: the inbox lives where the agent's environment does),
which takes the first of the candidate names no entry has and never writes through one. On
this machine that is ``link(2)`` relative to directory descriptors
(``sandbox/host_files.py``): ``link`` never follows a link at its target and fails if any
entry (a dangling symlink included) already has the name.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

from gateway_bot.sandbox.context_files import ContextFiles, FileRefused
from gateway_bot.sandbox.host_files import HostContextFiles

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
_MAX_NAME = 100
_MAX_TRIES = 1000
INCOMING = "incoming"
"""Staging directory beside the inbox, inside the conversation's root; never mounted."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class InboxError(Exception):
    """A file could not be placed in the inbox; the message says why, for the sender."""


def safe_filename(name: str) -> str:
    """A basename of ``[A-Za-z0-9._+-]`` that does not start with a dot, at most 100
    characters, keeping the extension when it has to shorten."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    base = _UNSAFE.sub("_", base).strip("._") or "file"
    if len(base) > _MAX_NAME:
        stem, dot, suffix = base.rpartition(".")
        if dot and 0 < len(suffix) <= 10:
            base = f"{stem[: _MAX_NAME - len(suffix) - 1]}.{suffix}"
        else:
            base = base[:_MAX_NAME]
    return base


def candidate_names(name: str) -> list[str]:
    """``name``, then ``stem-2.ext``, ``stem-3.ext``... the names an upload may take."""
    stem, dot, suffix = name.rpartition(".")
    if not dot or not stem:
        stem, suffix = name, ""
    names = [name]
    for number in range(2, _MAX_TRIES + 1):
        names.append(f"{stem}-{number}.{suffix}" if suffix else f"{stem}-{number}")
    return names


def size_text(size: int) -> str:
    if size >= 1_000_000:
        return f"{size / 1_000_000:.1f} MB"
    if size >= 1_000:
        return f"{size / 1_000:.0f} KB"
    return f"{size} bytes"


class IncomingFile:
    """One download being written to the staging directory (see ``InboxWriter.receive``)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self.size = 0
        self.saved_name = ""
        """The name it got in the inbox, once published."""

    async def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        await asyncio.to_thread(_write_all, self._fd, chunk)


class InboxWriter:
    """The only way channels put files into a conversation's inbox.

    ``root`` is the conversation's directory (daemon-owned, never mounted): downloads are
    staged in its ``incoming``. ``files`` is the context's files, through which a finished
    download is published (without it: the inbox ``root/inbox_name`` on this machine).
    """

    def __init__(
        self, root: Path, inbox_name: str = "inbox", *, files: ContextFiles | None = None
    ) -> None:
        self._root = root
        if files is None:
            inbox = root / inbox_name
            files = HostContextFiles(inbox, inbox, inbox, inbox, inbox)
        self._files = files

    async def save(self, name: str, data: bytes) -> str:
        """Store ``data`` under (a free variant of) the sanitised ``name``; return the name
        it got in the inbox."""
        async with self.receive(name) as incoming:
            await incoming.write(data)
        return incoming.saved_name

    @contextlib.asynccontextmanager
    async def receive(self, name: str) -> AsyncIterator[IncomingFile]:
        """Stream a download: write chunks to the yielded file; on a clean exit it is
        published into the inbox (its final name in ``.saved_name``), on an exception it is
        discarded and nothing reaches the inbox."""
        wanted = safe_filename(name)
        staging_name = f"{secrets.token_hex(8)}.part"
        staging_fd = await asyncio.to_thread(self._open_staging)
        try:
            fd = await asyncio.to_thread(
                os.open, staging_name, _NEW_FILE_FLAGS, 0o644, dir_fd=staging_fd
            )
            incoming = IncomingFile(fd)
            try:
                try:
                    yield incoming
                finally:
                    os.close(fd)
                staged = self._root / INCOMING / staging_name
                try:
                    saved = await self._files.put_inbox(candidate_names(wanted), staged)
                except FileRefused as exc:
                    raise InboxError(str(exc)) from exc
                incoming.saved_name = saved
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(staging_name, dir_fd=staging_fd)
        finally:
            os.close(staging_fd)

    def _open_staging(self) -> int:
        root_fd = os.open(self._root, _DIR_FLAGS)
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(INCOMING, 0o700, dir_fd=root_fd)
            return os.open(INCOMING, _DIR_FLAGS, dir_fd=root_fd)
        finally:
            os.close(root_fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
