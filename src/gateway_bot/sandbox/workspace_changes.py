"""The workspace's changes not on origin, read without trusting anything in it (/diff).

The changes are the commits on the workspace's HEAD that origin's default branch lacks
(neither the daemon's mirror nor the workspace's own ``origin/<branch>``, which a push
moves, has them) and the working tree's changes against HEAD, untracked files .gitignore
does not hide included. The workspace is hostile (workspace_snapshot.py): git never opens
its repository. It runs on a scratch repository made here and filled with what was read
no-follow (scratch_git.py). Only ``ls-files --others`` looks at the working tree, for
.gitignore: git opens in-tree .gitignore files no-follow, and the names it lists are read
here, never by git. For a workspace on this machine (``host_files.HostContextFiles``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from pathlib import Path

from gateway_bot.sandbox.context_files import DiffBase, WorkspaceChanges
from gateway_bot.sandbox.scratch_git import ScratchGit, ScratchGitError
from gateway_bot.sandbox.workspace_snapshot import (
    Head,
    WorkspaceUnreadable,
    link_objects,
    open_repository,
    read_head,
    read_ref,
)
from gateway_bot.sandbox.worktree_import import worktree_import_stream

MAX_FILE_BYTES = 8 * 1024 * 1024
"""A changed file larger than this is shown as a one-line note, not its content."""
MAX_CHANGED_BYTES = 64 * 1024 * 1024
MAX_PATHS = 100_000
_LISTED_COMMITS = 20


async def workspace_changes(workspace: Path, base: DiffBase) -> WorkspaceChanges:
    """What changed in ``workspace`` against ``base``; the scratch repository is made at
    ``base.scratch`` and removed before this returns (or is cancelled)."""
    stop = threading.Event()
    reader = _ChangeReader(ScratchGit(), base.mirror, stop)
    try:
        summary, patch = await reader.read(workspace, base, base.scratch)
    finally:
        stop.set()  # a thread still reading (this was cancelled) stops within a chunk
        await asyncio.to_thread(shutil.rmtree, base.scratch, True)
    return WorkspaceChanges(summary, patch)


class _ChangeReader:
    def __init__(self, git: ScratchGit, mirror: Path | None, stop: threading.Event) -> None:
        self._git = git
        self._mirror = mirror
        self._stop = stop

    async def read(self, workspace: Path, base: DiffBase, scratch: Path) -> tuple[str, str]:
        """(summary, patch) of the workspace's changes."""
        work_fd, git_fd = await asyncio.to_thread(open_repository, workspace)
        try:
            branch, upstream_commit = base.branch, base.upstream
            head = await asyncio.to_thread(read_head, git_fd)
            pushed = await asyncio.to_thread(read_ref, git_fd, f"refs/remotes/origin/{branch}")
            sample = head.commit or upstream_commit or ""
            object_format = "sha256" if len(sample) == 64 else "sha1"
            await self._make_scratch(scratch, object_format)
            await asyncio.to_thread(link_objects, git_fd, scratch / "objects", self._stop)
            if head.commit and not await self._exists(scratch, head.commit):
                raise WorkspaceUnreadable("The workspace's HEAD commit cannot be read.")
            excluded = [c for c in (upstream_commit, pushed) if c]
            count, listing, log = await self._commits(scratch, head, excluded)
            status, changes = await self._changes(scratch, workspace, work_fd, head)
        finally:
            os.close(git_fd)
            os.close(work_fd)
        parts = [f"HEAD is on {head.branch}." if head.branch else "HEAD is detached."]
        if head.commit is None:
            parts[0] = f"HEAD is on {head.branch}, which has no commit."
        if count:
            parts.append(f"{count} commit(s) not on origin's {branch}:\n{listing}")
        if status:
            parts.append(f"Uncommitted changes:\n{status}")
        if not count and not status:
            parts.append(f"No changes: nothing uncommitted, nothing origin's {branch} lacks.")
        patch = f"# Commits not on origin's {branch}\n\n{log}\n" if log else ""
        if changes:
            patch += f"# Uncommitted changes (working tree against HEAD)\n\n{changes}"
        return "\n".join(parts), patch

    async def _make_scratch(self, scratch: Path, object_format: str) -> None:
        """An empty repository of the daemon's, borrowing the mirror's objects."""
        await asyncio.to_thread(scratch.mkdir, 0o700)
        await self._git.run(
            None,
            "init",
            "--quiet",
            "--bare",
            "--template=",
            f"--object-format={object_format}",
            str(scratch),
        )
        if self._mirror is not None:
            await asyncio.to_thread(_borrow_objects, scratch, self._mirror)

    async def _exists(self, scratch: Path, commit: str) -> bool:
        try:
            await self._git.run(scratch, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
        except ScratchGitError:
            return False
        return True

    async def _commits(
        self, scratch: Path, head: Head, excluded: list[str]
    ) -> tuple[int, str, str]:
        """(how many, a short list, the log with patches) of HEAD's commits origin lacks."""
        if head.commit is None:
            return 0, "", ""
        known = [f"^{c}" for c in excluded if await self._exists(scratch, c)]
        revisions = [head.commit, *known, "--"]
        ids = (await self._git.text(scratch, "rev-list", *revisions)).split()
        if not ids:
            return 0, "", ""
        listed = f"--max-count={_LISTED_COMMITS}"
        oneline = await self._git.text(scratch, "log", listed, "--format=  %h %s", *revisions)
        more = len(ids) - _LISTED_COMMITS
        listing = oneline.rstrip() + (f"\n  … and {more} more" if more > 0 else "")
        log = await self._git.text(
            scratch, "log", "--reverse", "--format=fuller", *_PATCH_FLAGS, *revisions
        )
        return len(ids), listing, log

    async def _changes(
        self, scratch: Path, workspace: Path, work_fd: int, head: Head
    ) -> tuple[str, str]:
        """(name-status lines, patch) of the working tree against HEAD."""
        base = head.commit or await self._empty_tree(scratch)
        tracked = _parse_ls_tree(
            await self._git.run(scratch, "ls-tree", "-r", "-z", "-l", "--full-tree", base)
        )
        index = {"GIT_INDEX_FILE": str(scratch / "snapshot.index")}
        await self._git.run(scratch, "read-tree", base, env=index)
        others = ["ls-files", "-z", "--others", "--exclude-standard"]
        listed = await self._git.run(scratch, f"--work-tree={workspace}", *others, env=index)
        untracked = [p for p in listed.split(b"\0") if p and not p.endswith(b"/")]
        if len(tracked) + len(untracked) > MAX_PATHS:
            raise WorkspaceUnreadable(f"The workspace has over {MAX_PATHS:,} files to compare.")
        object_format = "sha256" if len(base) == 64 else "sha1"
        stream = await asyncio.to_thread(
            worktree_import_stream,
            work_fd,
            tracked,
            untracked,
            object_format,
            max_file=MAX_FILE_BYTES,
            max_total=MAX_CHANGED_BYTES,
            stop=self._stop,
        )
        await self._git.run(scratch, "fast-import", "--quiet", stdin=stream)
        compared = [base, "refs/gwb/worktree", "--"]
        status = await self._git.text(scratch, "diff", "--name-status", "--no-renames", *compared)
        if not status.strip():
            return "", ""
        patch = await self._git.text(scratch, "diff", *_PATCH_FLAGS, *compared)
        lines = ("  " + line.replace("\t", " ", 1) for line in status.rstrip().splitlines())
        return "\n".join(lines), patch

    async def _empty_tree(self, scratch: Path) -> str:
        """The empty tree's id in the scratch repository's object format."""
        found = await self._git.text(scratch, "hash-object", "-t", "tree", "--stdin", stdin=b"")
        return found.strip()


_PATCH_FLAGS = ("--stat", "--patch", "--no-color", "--no-ext-diff", "--no-textconv")


def _parse_ls_tree(raw: bytes) -> dict[bytes, tuple[str, str, int]]:
    """path -> (mode, object id, size; -1 for submodules) from ``ls-tree -r -z -l``."""
    entries: dict[bytes, tuple[str, str, int]] = {}
    for record in raw.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        mode, _kind, object_id, size = meta.decode().split()
        entries[path] = (mode, object_id, int(size) if size != "-" else -1)
    return entries


def _borrow_objects(scratch: Path, mirror: Path) -> None:
    if (mirror / "objects").is_dir():
        alternates = scratch / "objects" / "info" / "alternates"
        alternates.parent.mkdir(exist_ok=True)
        alternates.write_text(f"{mirror / 'objects'}\n")
