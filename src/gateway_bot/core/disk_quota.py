"""A conversation's disk limit: measure what its agent can write, stop a task over it.

One conversation must not fill the host's disk (then every SQLite write fails, for every
conversation). No filesystem quota is used: project quotas need an xfs or ext4 filesystem
mounted with them and root's quota tools, which most hosts (this project's machines among
them) do not have. Instead the directories the agent can write are measured before a task
starts and every few seconds while it runs, in a thread.

The walk never follows a link: every directory is opened with O_NOFOLLOW relative to its
parent's descriptor (the agent can swap a directory for a symlink at any moment), entries
are lstat'ed, a file with several hard links counts once, and sizes are blocks on disk
(a sparse file costs what it occupies). The effort is bounded: past ``MAX_ENTRIES`` entries
or ``MAX_DEPTH`` levels the walk stops, and such a tree counts as over the limit, because
what could not be measured could hide anything.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

log = logging.getLogger(__name__)

MB = 1024 * 1024
AGENT_WRITABLE = ("workspace", "home", "inbox", "outbox", "storage", "sent")
"""A conversation's directories its agent fills: the ones mounted into its sandbox, and
``sent/``, where what it leaves in its outbox is copied (a sparse file there costs its full
size)."""
MAX_ENTRIES = 1_000_000
MAX_DEPTH = 256
"""Directories held open at once during a walk (one descriptor per level)."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

T = TypeVar("T")


@dataclass(frozen=True)
class DiskUsage:
    """Bytes on disk per directory name, largest first."""

    by_directory: tuple[tuple[str, int], ...]
    complete: bool
    """False when the walk stopped at MAX_ENTRIES or MAX_DEPTH."""

    @property
    def total(self) -> int:
        return sum(size for _, size in self.by_directory)


@dataclass(frozen=True)
class DiskLimit:
    """The directories of one conversation the agent can write, and their limit."""

    directories: Mapping[str, Path]
    """Name the user knows it by (workspace, home...) -> host path."""
    limit_bytes: int
    interval_s: float

    def measure(self) -> DiskUsage:
        """Blocking: call it in a thread."""
        return measure(self.directories)

    async def over_limit(self) -> DiskUsage | None:
        usage = await asyncio.to_thread(self.measure)
        return usage if usage.total > self.limit_bytes or not usage.complete else None

    async def watch(self) -> DiskUsage:
        """Return the first measurement over the limit, checking every ``interval_s`` (the
        caller measured just before). Waits at least twice as long as a measurement took,
        so a huge tree costs a third of a core at most."""
        pause = self.interval_s
        while True:
            await asyncio.sleep(pause)
            started = time.monotonic()
            try:
                usage = await self.over_limit()
            except OSError:
                log.exception("measuring %s failed", ", ".join(self.directories))
                usage = None
            if usage is not None:
                return usage
            pause = max(self.interval_s, 2 * (time.monotonic() - started))

    async def run_within(self, work: Awaitable[T]) -> T | DiskUsage:
        """Run ``work`` while watching the directories. Over the limit, ``work`` is
        cancelled (cancelling an agent run kills its processes) and the measurement that
        stopped it is returned. Cancelling this cancels both."""
        job = asyncio.ensure_future(work)
        watcher = asyncio.create_task(self.watch())
        try:
            await asyncio.wait({job, watcher}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            job.cancel()
            watcher.cancel()
            await asyncio.wait({job, watcher})
            raise
        if job.done():
            watcher.cancel()
            await asyncio.wait({watcher})
            return job.result()
        job.cancel()
        await asyncio.wait({job})  # the run's own clean-up (kill, wait) finishes here
        return watcher.result()

    def explain(self, usage: DiskUsage, *, stopped: bool) -> str:
        """What the user reads: what happened, which directory is large, what to do."""
        what = (
            "The task was stopped: this conversation's files"
            if stopped
            else "This message was not run: this conversation's files"
        )
        if usage.complete:
            size = f"take {_mb(usage.total)}, over its limit of {_mb(self.limit_bytes)}"
        else:
            size = (
                f"hold more than {MAX_ENTRIES:,} entries or nest deeper than {MAX_DEPTH} "
                f"levels, which counts as over its limit of {_mb(self.limit_bytes)}"
            )
        sizable = [(name, used) for name, used in usage.by_directory if used >= MB // 10]
        sizable = sizable or list(usage.by_directory[:1])
        largest = ", ".join(f"{name} {_mb(used)}" for name, used in sizable[:3])
        return (
            f"{what} {size} (largest: {largest}).\n"
            "To go on, start a new conversation with /new; or have the operator delete "
            f"files in this conversation's {usage.by_directory[0][0]} directory on the "
            "server, or raise execution.conversation_disk_limit_mb."
        )


def _mb(size: int) -> str:
    return f"{size / MB:,.1f} MB"


def measure(directories: Mapping[str, Path]) -> DiskUsage:
    """Bytes on disk under each directory, never following a link."""
    seen: set[tuple[int, int]] = set()
    budget = [MAX_ENTRIES]
    complete = True
    sizes = []
    for name, path in directories.items():
        try:
            fd = os.open(path, _DIR_FLAGS)
        except OSError:
            sizes.append((name, 0))  # absent (not made yet), or a link: nothing of ours
            continue
        try:
            size, whole = _walk(fd, seen, budget, MAX_DEPTH)
        finally:
            os.close(fd)
        sizes.append((name, size))
        complete = complete and whole
    sizes.sort(key=lambda pair: pair[1], reverse=True)
    return DiskUsage(tuple(sizes), complete)


def _walk(fd: int, seen: set[tuple[int, int]], budget: list[int], depth: int) -> tuple[int, bool]:
    """Blocks under the open directory ``fd``; False when a bound stopped the walk."""
    total = _blocks(os.fstat(fd), seen)
    subdirectories = []
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                budget[0] -= 1
                if budget[0] < 0:
                    return total, False
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue  # removed meanwhile
                if stat.S_ISDIR(info.st_mode):
                    subdirectories.append(entry.name)
                else:
                    total += _blocks(info, seen)
    except PermissionError:
        return total, True  # only a daemon not running as root meets one
    for name in subdirectories:
        if depth <= 0:
            return total, False
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            continue  # removed, or swapped for a link, meanwhile
        try:
            size, complete = _walk(child, seen, budget, depth - 1)
        finally:
            os.close(child)
        total += size
        if not complete:
            return total, False
    return total, True


def _blocks(info: os.stat_result, seen: set[tuple[int, int]]) -> int:
    if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
        key = (info.st_dev, info.st_ino)
        if key in seen:
            return 0
        seen.add(key)
    return int(info.st_blocks) * 512
