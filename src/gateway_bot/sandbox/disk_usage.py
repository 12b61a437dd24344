"""How much disk a context's directories take, measured without following a link.

The walk never follows a link: every directory is opened with O_NOFOLLOW relative to its
parent's descriptor (the agent can swap a directory for a symlink at any moment), entries
are lstat'ed, a file with several hard links counts once, and sizes are blocks on disk
(a sparse file costs what it occupies). The effort is bounded: past ``MAX_ENTRIES`` entries
or ``MAX_DEPTH`` levels the walk stops, and such a tree counts as incomplete (the caller
treats it as over any limit: what could not be measured could hide anything).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

MAX_ENTRIES = 1_000_000
MAX_DEPTH = 256
"""Directories held open at once during a walk (one descriptor per level)."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class DiskUsage:
    """Bytes on disk per directory name, largest first."""

    by_directory: tuple[tuple[str, int], ...]
    complete: bool
    """False when the walk stopped at MAX_ENTRIES or MAX_DEPTH."""

    @property
    def total(self) -> int:
        return sum(size for _, size in self.by_directory)


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


def combined(*usages: DiskUsage) -> DiskUsage:
    """Several measurements as one (largest directory first)."""
    sizes = sorted(
        (pair for usage in usages for pair in usage.by_directory),
        key=lambda pair: pair[1],
        reverse=True,
    )
    return DiskUsage(tuple(sizes), all(usage.complete for usage in usages))
