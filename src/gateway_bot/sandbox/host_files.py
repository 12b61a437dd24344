"""``ContextFiles`` for a context whose directories are on this machine (``host`` and local
``podman``: bind mounts of the same directories).

The agent writes these directories and can swap any entry between a file, a link, a
directory and a FIFO at any moment, while the daemon runs as root. So no path in them is
trusted twice: each directory is opened no-follow, each entry once, no-follow and
non-blocking, relative to that descriptor; what is read or copied is what the descriptor
holds. Nothing is ever written through an entry the agent controls: uploads are staged on
the daemon's side and published with ``link(2)``, which never follows and never replaces;
home files are written under a fresh name and renamed over the old entry.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
import stat
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gateway_bot.sandbox.base import ExecutionContext
from gateway_bot.sandbox.context_files import (
    DiffBase,
    FileRefused,
    GitOrigin,
    LogTail,
    WorkspaceChanges,
    WorkspaceSetupFailed,
)
from gateway_bot.sandbox.disk_usage import DiskUsage, measure
from gateway_bot.sandbox.fd_copy import copy_at_most
from gateway_bot.sandbox.home_files import make_home_dir, write_home_bytes
from gateway_bot.sandbox.host_commands import remove_trees, run_git
from gateway_bot.sandbox.workspace_changes import workspace_changes

log = logging.getLogger(__name__)

MAX_OUTBOX_FILE_BYTES = 1024 * 1024 * 1024
"""Outbox files larger than this stay where they are (no channel takes them anyway)."""
MAX_OUTBOX_FILES = 20
MAX_OUTBOX_BYTES = 1024 * 1024 * 1024
"""Per task, at most this many files and bytes are taken from the outbox; the rest wait
for the next task. A sparse file costs nothing in the outbox and its full size copied."""
_CHECKOUT_SAFETY = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")
"""The workspace's checkout writes the repo's files on the host, as the daemon: the repo's
``.gitattributes`` names the filter that turns each file into what is written, and the
host's system and global config say what program a filter name runs (``git lfs install``
puts git-lfs there, which then fetches from the URL the repo's ``.lfsconfig`` names, from
the host's network). So the clone from the local mirror reads no config but its own (no
credential, ``insteadOf`` or identity is needed for it) and runs no hook: repo content
never picks a program the host runs. LFS files arrive as their pointers."""
NAME_MAX_BYTES = 255
"""A file name's longest, in bytes (``NAME_MAX`` of Linux file systems)."""
_KEPT_SUFFIX_BYTES = 16
"""A name shortened to fit keeps an extension of at most this many bytes (``.tar.gz``,
``.docx``); a longer "extension" is just the name's end, cut like the rest."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class HostContextFiles:
    """A context's directories as host paths (the parent of each is the daemon's)."""

    workspace: Path
    home: Path
    inbox: Path
    outbox: Path
    storage: Path
    network_log: Path | None = None
    """The sandbox's log of this context's requests (a file, or the sandbox's one absolute
    link to its proxy's log), in a directory of the daemon's."""

    @classmethod
    def of(cls, context: ExecutionContext) -> HostContextFiles:
        return cls(
            context.workspace,
            context.home,
            context.inbox,
            context.outbox,
            context.storage,
            context.network_log,
        )

    async def ensure_workspace(self, origin: GitOrigin) -> None:
        for path in (self.home, self.inbox, self.outbox, self.storage):
            await asyncio.to_thread(path.mkdir, parents=True, exist_ok=True)
        if await asyncio.to_thread((self.workspace / ".git").exists):
            return
        if await self.workspace_exists():
            # The agent removed its .git: a clone could not take the workspace's place
            # (not empty), and one per task would only cost the host a checkout each time.
            raise WorkspaceSetupFailed(
                "the workspace has no .git any more (the agent removed it): /new starts a "
                "conversation with a fresh clone"
            )
        partial = self.workspace.with_name(f"{self.workspace.name}.partial")
        await asyncio.to_thread(shutil.rmtree, partial, True)
        branch = ["--branch", origin.branch] if origin.branch else []
        await run_git(
            *_CHECKOUT_SAFETY, "clone", "--quiet", "--no-hardlinks", "--template=", *branch,
            str(origin.mirror), str(partial), own_config_only=True,
        )  # fmt: skip
        await run_git(
            *_CHECKOUT_SAFETY, "-C", str(partial), "remote", "set-url", "origin", origin.url,
            own_config_only=True,
        )  # fmt: skip
        await asyncio.to_thread(partial.rename, self.workspace)

    async def workspace_exists(self) -> bool:
        def is_dir() -> bool:
            try:
                return stat.S_ISDIR(os.lstat(self.workspace).st_mode)
            except OSError:
                return False

        return await asyncio.to_thread(is_dir)

    async def put_inbox(self, names: Sequence[str], source: Path) -> str:
        return await asyncio.to_thread(_publish, source, self.inbox, names)

    async def take_outbox(self, into: Path, skip: frozenset[str]) -> list[Path]:
        return await asyncio.to_thread(_move_regular_files, self.outbox, into, skip)

    async def take_outbox_file(self, name: str, limit: int) -> bytes | None:
        return await asyncio.to_thread(_take_file, self.outbox, name, limit)

    async def workspace_changes(self, base: DiffBase) -> WorkspaceChanges:
        return await workspace_changes(self.workspace, base)

    async def measure(self) -> DiskUsage:
        directories = {
            "workspace": self.workspace,
            "home": self.home,
            "inbox": self.inbox,
            "outbox": self.outbox,
            "storage": self.storage,
        }
        return await asyncio.to_thread(measure, directories)

    async def put_home_file(self, relative: str, data: bytes) -> None:
        await write_home_bytes(self.home, relative, data)

    async def make_home_dir(self, relative: str) -> None:
        await make_home_dir(self.home, relative)

    async def remove(self) -> None:
        own = (self.workspace, self.home, self.inbox, self.outbox, self.storage)
        partial = self.workspace.with_name(f"{self.workspace.name}.partial")
        await remove_trees([*own, partial])

    async def network_log_tail(self, limit: int) -> LogTail | None:
        if self.network_log is None:
            return None
        return await asyncio.to_thread(_log_tail, self.network_log, limit)


def _log_tail(log: Path, limit: int) -> LogTail | None:
    """The log's last ``limit`` bytes. Its directory is opened no-follow; the log there is
    a plain file opened no-follow, or the sandbox's own link (absolute, to the proxy's log
    in a directory of ours) followed once, its target opened no-follow: a link the proxy
    put in its logs directory, or a relative one, is refused."""
    try:
        directory = os.open(log.parent, _DIR_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FileRefused(f"The conversation's directory is not readable: {exc.strerror}.") from exc
    try:
        descriptor = _open_log(directory, log.name)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise FileRefused(
                "The network log is a link where a file should be: not read."
            ) from exc
        raise FileRefused(f"The network log is not readable: {exc.strerror or exc}.") from exc
    finally:
        os.close(directory)
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused("The network log is not a regular file: not read.")
        start = max(0, info.st_size - limit)
        handle.seek(start)
        return LogTail(handle.read(limit), cut=start > 0)


def _open_log(directory: int, name: str) -> int:
    try:
        target = os.readlink(name, dir_fd=directory)
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # EINVAL: not a link
            raise
        return os.open(name, _READ_FLAGS, dir_fd=directory)
    if not os.path.isabs(target):
        raise OSError(errno.ELOOP, "a relative link")
    return os.open(target, _READ_FLAGS)


def _publish(source: Path, inbox: Path, names: Sequence[str]) -> str:
    """Link the daemon's staged ``source`` into ``inbox`` under the first free name. The
    file first goes to whoever owns the inbox (a sandbox may map the agent's root to
    another host uid), so the agent can edit what it was sent."""
    try:
        inbox_fd = os.open(inbox, _DIR_FLAGS)
    except OSError as exc:
        raise FileRefused(f"the conversation's inbox is unusable ({exc.strerror})") from exc
    try:
        owner = os.fstat(inbox_fd)
        source_fd = os.open(source.parent, _DIR_FLAGS)
        try:
            if (owner.st_uid, owner.st_gid) != (0, 0):
                with contextlib.suppress(OSError):
                    os.chown(
                        source.name, owner.st_uid, owner.st_gid,
                        dir_fd=source_fd, follow_symlinks=False,
                    )  # fmt: skip
            for candidate in names:
                try:
                    os.link(
                        source.name,
                        candidate,
                        src_dir_fd=source_fd,
                        dst_dir_fd=inbox_fd,
                        follow_symlinks=False,
                    )
                except FileExistsError:
                    continue
                except OSError as exc:
                    if exc.errno == errno.ENAMETOOLONG:
                        continue
                    raise FileRefused(f"{names[0]} could not be stored ({exc.strerror})") from exc
                return candidate
        finally:
            os.close(source_fd)
    finally:
        os.close(inbox_fd)
    raise FileRefused(f"{names[0]}: the inbox already has {len(names)} files of that name")


def _take_file(directory: Path, name: str, limit: int) -> bytes | None:
    """Read and remove ``directory/name`` once: None when absent; FileRefused when it is not
    a regular file of at most ``limit`` bytes (removed all the same)."""
    try:
        dir_fd = os.open(directory, _DIR_FLAGS)
    except OSError:
        return None  # no directory (or a link in its place): nothing to read
    try:
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            _remove(dir_fd, name)
            if exc.errno == errno.ELOOP:
                raise FileRefused("is a symbolic link, not a file") from None
            raise FileRefused(f"could not be opened ({exc.strerror})") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise FileRefused("is not a regular file")
            if info.st_size > limit:
                raise FileRefused(f"has {info.st_size:,} bytes, more than the {limit:,} allowed")
            data = os.read(fd, limit + 1)  # the file may have grown since fstat
        finally:
            os.close(fd)
            _remove(dir_fd, name)
    finally:
        os.close(dir_fd)
    if len(data) > limit:
        raise FileRefused(f"is larger than {limit:,} bytes")
    return data


def _remove(dir_fd: int, name: str) -> None:
    with contextlib.suppress(OSError):  # a directory stays (take_outbox never sends one)
        os.unlink(name, dir_fd=dir_fd)


def _move_regular_files(source: Path, target: Path, skip: frozenset[str]) -> list[Path]:
    """Copy each regular file out of the agent-writable ``source`` into ``target`` (a
    directory only the daemon writes), then remove it from ``source``.

    The agent can swap an entry between a file and a symlink at any moment, so no path in
    ``source`` is trusted twice: each entry is opened once, no-follow and non-blocking (a
    FIFO must not hang us), relative to a descriptor of ``source`` opened no-follow; the
    open descriptor must be a regular file, and its bytes are what get copied. Links,
    directories, devices and FIFOs are never sent.
    """
    try:
        source_fd = os.open(source, _DIR_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return []
        raise
    copied: list[Path] = []
    budget = MAX_OUTBOX_BYTES
    try:
        for name in sorted(os.listdir(source_fd)):
            if len(copied) >= MAX_OUTBOX_FILES:
                break
            if name in skip:
                continue
            try:
                fd = os.open(name, _READ_FLAGS, dir_fd=source_fd)
            except OSError:
                continue  # a link (ELOOP), gone, or unreadable: never followed
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode) or info.st_size > min(
                    MAX_OUTBOX_FILE_BYTES, budget
                ):
                    continue
                target.mkdir(parents=True, exist_ok=True)
                shown = shown_name(name, {p.name for p in copied})
                try:
                    _copy_fd(fd, target / shown)
                except OSError as exc:
                    # One file that cannot be copied (a full disk, a name the file system
                    # refuses) must not cost the task its other files and its reply: it
                    # stays in the outbox, and the next task tries it again.
                    log.warning("outbox file %r not sent: %s", shown, exc.strerror or exc)
                    with contextlib.suppress(OSError):
                        (target / shown).unlink()
                    continue
                budget -= info.st_size
            finally:
                os.close(fd)
            copied.append(target / shown)
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=source_fd)  # unlink never follows a link
    finally:
        os.close(source_fd)
    return copied


def shown_name(name: str, taken: set[str]) -> str:
    """The name an outbox file goes out under: its own, with every character that is no
    printable text (controls, line breaks, the bidi and zero-width format characters that
    make ``report\u202etxt.exe`` read as ``reportexe.txt``) as ``_``, and ``-2``, ``-3``...
    before the extension when that name is ``taken`` by another file of the task. Chat
    shows it as the file's name, and logs print it.

    Two names of 255 bytes can clean to the same one, and ``-2`` would make it one the file
    system refuses (ENAMETOOLONG): the stem is cut, on a character boundary, so that the
    numbered name fits in NAME_MAX_BYTES; a short extension is kept."""
    clean = "".join("_" if unicodedata.category(c)[0] in "CZ" and c != " " else c for c in name)
    stem, dot, suffix = clean.rpartition(".")
    stem, suffix = (stem, f".{suffix}") if dot and stem else (clean, "")
    candidate = _fitted(stem, "", suffix)
    number = 2
    while candidate in taken:
        candidate = _fitted(stem, f"-{number}", suffix)
        number += 1
    return candidate


def _fitted(stem: str, number: str, suffix: str) -> str:
    """``stem + number + suffix`` in at most NAME_MAX_BYTES, cut on character boundaries
    (the cleaned names hold no surrogates, so each encodes): the stem gives way for a short
    extension; a long one (past _KEPT_SUFFIX_BYTES, just the name's end) is cut itself. The
    number is always kept, so the names the caller tries differ."""
    if len(suffix.encode()) <= _KEPT_SUFFIX_BYTES:
        return _cut(stem, NAME_MAX_BYTES - len(f"{number}{suffix}".encode())) + number + suffix
    head = _cut(stem, NAME_MAX_BYTES - len(number.encode())) + number
    return _cut(head + suffix, NAME_MAX_BYTES)


def _cut(text: str, limit: int) -> str:
    return text.encode()[: max(limit, 0)].decode("utf-8", "ignore")


def _copy_fd(fd: int, destination: Path) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        out = os.open(destination, flags, 0o600)
    except FileExistsError:  # a re-run after a crash: sent/ is the daemon's alone
        destination.unlink()
        out = os.open(destination, flags, 0o600)
    try:
        copy_at_most(fd, out, MAX_OUTBOX_FILE_BYTES)
    finally:
        os.close(out)
