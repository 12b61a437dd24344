"""What the daemon may do with a context's files, wherever they live (decision 0095).

A context's directories (workspace, agent home, inbox, outbox, storage) belong to its
execution environment. On this machine they are host directories bind-mounted into a
container (or used directly by ``sandbox: none``); on Kubernetes they would live in a
volume the daemon may never mount, on a remote Podman host on that host's disk. So nothing
outside the sandbox opens them: it asks ``Sandbox.files(context)`` for this object and goes
through its operations, each of which names the daemon's own side explicitly (a staged
upload to publish, a daemon directory to take the outbox into, a scratch path).

Every operation treats what it finds as hostile: the agent may have left links, FIFOs,
directories or gigabytes anywhere in these directories. ``host_files.HostContextFiles`` is
the implementation for directories on this machine (``host`` and local ``podman``): no-follow
opens relative to directory descriptors throughout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gateway_bot.sandbox.disk_usage import DiskUsage


class FileRefused(Exception):
    """A context file could not be used (a link, not a regular file, too large, a name
    taken...); the message says why, in words for the person who sent or asked for it."""


class WorkspaceSetupFailed(Exception):
    """The workspace could not be made (git's own words in the message)."""


@dataclass(frozen=True)
class GitOrigin:
    """Where a context's workspace is cloned from."""

    mirror: Path
    """The daemon's bare mirror of the repo (read-only to the environment)."""
    url: str
    """The repo's real URL: the workspace's ``origin`` after the clone."""
    branch: str | None
    """The branch to check out; None for the repo's default."""


@dataclass(frozen=True)
class DiffBase:
    """What /diff compares the workspace against."""

    branch: str
    """origin's default branch, by name."""
    upstream: str | None
    """Its commit in the daemon's mirror; None before the first fetch."""
    mirror: Path | None
    """The daemon's mirror, whose objects the comparison may borrow."""
    scratch: Path
    """A path the daemon owns and does not use: an implementation comparing on this machine
    makes its scratch repository there and removes it before returning."""


@dataclass(frozen=True)
class WorkspaceChanges:
    """The workspace's changes not on origin: a summary for the message and the patch
    (commits origin lacks, then the working tree against HEAD; empty when nothing)."""

    summary: str
    patch: str


@dataclass(frozen=True)
class LogTail:
    """The end of a log file: at most the bytes asked for."""

    data: bytes
    cut: bool
    """True when the file held more (``data`` then starts mid-line)."""


class ContextFiles(Protocol):
    """A context's files, as the daemon may touch them. Every method may raise OSError for a
    fault of the storage itself; hostile content is reported as described per method."""

    async def ensure_workspace(self, origin: GitOrigin) -> None:
        """Make the context's directories and clone the workspace from ``origin`` when it
        has none yet (an existing workspace is never touched: no fetch, no rebase). Raises
        WorkspaceSetupFailed."""
        ...

    async def workspace_exists(self) -> bool:
        """Has the workspace been cloned (is there a directory where it belongs)?"""
        ...

    async def put_inbox(self, names: Sequence[str], source: Path) -> str:
        """Publish ``source`` (a regular file the daemon staged on its own disk) into the
        inbox under the first of ``names`` no entry has; return that name. Nothing in the
        inbox is ever written through or replaced. Raises FileRefused."""
        ...

    async def take_outbox(self, into: Path, skip: frozenset[str]) -> list[Path]:
        """Move the outbox's regular files (never a link, directory or FIFO; bounded in
        count and bytes) into ``into``, a directory of the daemon's, and return the copies.
        Names in ``skip`` stay where they are."""
        ...

    async def take_outbox_file(self, name: str, limit: int) -> bytes | None:
        """Read and remove the outbox entry ``name``, whatever it is; None when there is
        none. Raises FileRefused when it is not a regular file of at most ``limit`` bytes
        (it is removed all the same: it is looked at once)."""
        ...

    async def workspace_changes(self, base: DiffBase) -> WorkspaceChanges:
        """The workspace's commits and uncommitted changes not on ``base``, computed without
        ever letting the workspace's own git configuration run. Raises
        ``workspace_snapshot.WorkspaceUnreadable`` (no workspace, or not a plain repository)
        or ``scratch_git.ScratchGitError`` (git could not compare)."""
        ...

    async def measure(self) -> DiskUsage:
        """Bytes on disk per directory (workspace, home, inbox, outbox, storage)."""
        ...

    async def put_home_file(self, relative: str, data: bytes) -> None:
        """Write ``data`` to ``relative`` (slash-separated, directories made as needed) in
        the agent's home, replacing whatever entry has that name, never writing through it."""
        ...

    async def make_home_dir(self, relative: str) -> None:
        """Make the directory ``relative`` in the agent's home (a CLI that insists on it)."""
        ...

    async def remove(self) -> None:
        """Delete the context's files for good (garbage collection of an idle conversation,
        after its container was discarded): the workspace, home, inbox, outbox and storage.
        Never follows a link out of them. Raises OSError when they could not be removed."""
        ...

    async def network_log_tail(self, limit: int) -> LogTail | None:
        """The last ``limit`` bytes of the context's network log (every request its egress
        filtering allowed or blocked, one JSON line each, as the sandbox's proxy wrote it:
        hostile); None when there is none yet. Raises FileRefused (a link or a special file
        where the log should be, or unreadable)."""
        ...
