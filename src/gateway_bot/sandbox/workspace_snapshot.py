"""Reading a conversation's workspace for /diff without trusting anything in it.

The agent controls every byte of the workspace, its ``.git`` included. Git itself must not
be pointed at that repository: its config can run programs (core.fsmonitor, filter and
diff drivers, pagers, include.path), and its structure can send git's reads anywhere on the
host (a ``.git`` file naming another repository, ``commondir``, ``objects/info/alternates``,
refs or object directories that are symlinks), which would show other repositories' work in
this conversation's chat. So the daemon reads what it needs itself, every open no-follow and
relative to a directory descriptor, and hands git only a scratch repository it made:

- HEAD and the one ref it names (loose or packed), parsed here;
- the object files (loose objects, pack and index files; never ``objects/info``), each
  opened no-follow, checked to be a regular file on the descriptor, and hard-linked (or
  copied where linking is refused) into the scratch repository;
- working-tree files by path, each path walked component by component without following.

Everything here is blocking: callers run it in a thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from gateway_bot.sandbox.fd_copy import copy_at_most

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
MAX_COPIED_BYTES = 512 * 1024 * 1024
"""The most /diff copies of object files the kernel would not let it link."""
_SMALL_FILE = 64 * 1024 * 1024
"""The most read from HEAD or packed-refs (a repository's own are far smaller)."""
_OBJECT_ID = re.compile(rb"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_REF = re.compile(r"^refs/(?!.*(?:\.\.|//|/\.|@\{|\.lock(?:/|$)))[A-Za-z0-9._/+-]+$")
_PACK_FILE = re.compile(r"^pack-[0-9a-f]{40,64}\.(?:pack|idx)$")
_LOOSE_DIR = re.compile(r"^[0-9a-f]{2}$")
_LOOSE_FILE = re.compile(r"^(?:[0-9a-f]{38}|[0-9a-f]{62})$")


class WorkspaceUnreadable(Exception):
    """The workspace is missing or not a plain git repository; the message says which."""


@dataclass(frozen=True)
class Head:
    branch: str | None
    """``main`` for refs/heads/main; None when detached."""
    commit: str | None
    """None on an unborn branch (nothing committed yet)."""


@dataclass(frozen=True)
class FileState:
    """One working-tree path as found on disk: what git would store for it."""

    mode: str
    """100644, 100755 or 120000; empty when the path is gone or not a file or link."""
    content: bytes | None
    """The blob's bytes; None when too large to keep."""
    size: int
    object_id: str | None = None
    """The blob's id, computed when asked for (the size matched HEAD's)."""


def open_repository(workspace: Path) -> tuple[int, int]:
    """Descriptors of the workspace and of its ``.git`` directory, neither followed through
    a link. ``.git`` must be a real directory: a ``.git`` file could name any repository."""
    try:
        work_fd = os.open(workspace, DIR_FLAGS)
    except FileNotFoundError:
        raise WorkspaceUnreadable(
            "Nothing to show yet: the first message clones the repo."
        ) from None
    except OSError as exc:
        raise WorkspaceUnreadable(f"The workspace cannot be read ({exc.strerror}).") from exc
    try:
        git_fd = os.open(".git", DIR_FLAGS, dir_fd=work_fd)
    except OSError:
        os.close(work_fd)
        raise WorkspaceUnreadable(
            "The workspace has no git repository (.git is missing, or not a directory)."
        ) from None
    return work_fd, git_fd


def read_head(git_fd: int) -> Head:
    """HEAD as git would resolve it, from HEAD, the loose ref or packed-refs."""
    text = _read_small(git_fd, "HEAD").strip()
    if _OBJECT_ID.match(text):
        return Head(None, text.decode())
    if not text.startswith(b"ref: "):
        raise WorkspaceUnreadable("The workspace's HEAD is not a branch or a commit.")
    ref = text[5:].decode("utf-8", "replace").strip()
    if not ref.startswith("refs/heads/") or not _REF.match(ref):
        raise WorkspaceUnreadable("The workspace's HEAD names something that is not a branch.")
    return Head(ref.removeprefix("refs/heads/"), read_ref(git_fd, ref))


def read_ref(git_fd: int, ref: str) -> str | None:
    """The object id ``ref`` (``refs/...``) holds, loose or packed; None when it is absent."""
    if not _REF.match(ref):
        return None
    with contextlib.suppress(WorkspaceUnreadable):
        loose = _read_small(git_fd, ref).strip()
        if _OBJECT_ID.match(loose):
            return loose.decode()
    with contextlib.suppress(WorkspaceUnreadable):
        for line in _read_small(git_fd, "packed-refs").splitlines():
            commit, _, name = line.partition(b" ")
            if name.decode("utf-8", "replace") == ref and _OBJECT_ID.match(commit):
                return commit.decode()
    return None


def link_objects(git_fd: int, objects_dir: Path, stop: threading.Event | None = None) -> None:
    """Hard-link (or copy) the repository's object files into ``objects_dir``: loose
    objects and packs, nothing else (``info/alternates`` would name other repositories).
    A file reached again under another name is taken once; copies (where the kernel
    refuses a link) stop at ``MAX_COPIED_BYTES`` in all (WorkspaceUnreadable), and all
    of it when ``stop`` is set."""
    budget = _CopyBudget(MAX_COPIED_BYTES, stop or threading.Event())
    with _opened_dir(git_fd, "objects") as objects_fd:
        for name in os.listdir(objects_fd):
            if _LOOSE_DIR.match(name):
                with _opened_dir(objects_fd, name) as loose_fd:
                    for entry in os.listdir(loose_fd):
                        budget.check()
                        if _LOOSE_FILE.match(entry):
                            _link_regular(loose_fd, entry, objects_dir / name / entry, budget)
            elif name == "pack":
                with _opened_dir(objects_fd, name) as pack_fd:
                    for entry in os.listdir(pack_fd):
                        budget.check()
                        if _PACK_FILE.match(entry):
                            _link_regular(pack_fd, entry, objects_dir / "pack" / entry, budget)


@dataclass
class _CopyBudget:
    """What ``link_objects`` may still copy, and the files it already took."""

    left: int
    stop: threading.Event
    taken: set[tuple[int, int]] = field(default_factory=set)

    def check(self) -> None:
        given_up(self.stop)


class WorkTree:
    """Working-tree paths read relative to the workspace's descriptor, each component
    opened no-follow: a path through a symlinked directory reads as gone."""

    def __init__(
        self, work_fd: int, object_format: str, stop: threading.Event | None = None
    ) -> None:
        self._dirs: dict[bytes, int | None] = {b"": work_fd}
        self._owned: list[int] = []
        self._object_format = object_format
        self._stop = stop or threading.Event()

    def close(self) -> None:
        for fd in self._owned:
            os.close(fd)
        self._owned.clear()

    def state(self, path: bytes, max_read: int, hash_if_size: int = -1) -> FileState:
        """What is at ``path`` now: content kept up to ``max_read`` bytes, and the blob id
        when the size is ``hash_if_size`` (HEAD's: the file may be unchanged)."""
        parent, _, name = path.rpartition(b"/")
        dir_fd = self._dir(parent)
        if dir_fd is None or name in (b"", b".", b".."):
            return FileState("", None, 0)
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                target = os.readlink(name, dir_fd=dir_fd)
                found = blob_id(target, self._object_format)
                return FileState("120000", target, len(target), found)
            if not stat.S_ISREG(info.st_mode):
                return FileState("", None, 0)
            fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
        except OSError:
            return FileState("", None, 0)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return FileState("", None, 0)
            mode = "100755" if info.st_mode & stat.S_IXUSR else "100644"
            if info.st_size != hash_if_size:
                content = _read_all(fd, max_read + 1) if info.st_size <= max_read else b""
                if info.st_size > max_read or len(content) > max_read:
                    return FileState(mode, None, max(info.st_size, len(content)))
                return FileState(mode, content, len(content))
            return self._hashed(fd, mode, info.st_size, max_read)
        finally:
            os.close(fd)

    def _hashed(self, fd: int, mode: str, size: int, max_read: int) -> FileState:
        digest = _new_digest(self._object_format)
        digest.update(b"blob %d\0" % size)
        kept: list[bytes] = []
        total = 0
        while chunk := os.read(fd, 1024 * 1024):
            given_up(self._stop)  # a sparse terabyte reads at memory speed, for minutes
            digest.update(chunk)
            total += len(chunk)
            if total <= max_read:
                kept.append(chunk)
        content = b"".join(kept) if total <= max_read else None
        found = digest.hexdigest() if total == size else None
        return FileState(mode, content, total, found)

    def _dir(self, path: bytes) -> int | None:
        if path in self._dirs:
            return self._dirs[path]
        parent, _, name = path.rpartition(b"/")
        parent_fd = self._dir(parent)
        fd: int | None = None
        if parent_fd is not None and name not in (b".", b"..", b".git"):
            try:
                fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
                self._owned.append(fd)
            except OSError:
                fd = None
        self._dirs[path] = fd
        return fd


def given_up(stop: threading.Event) -> None:
    """Raise WorkspaceUnreadable once ``stop`` is set: the reading runs in a thread, which
    /diff's time limit cannot cancel; the waiting side sets ``stop`` when it gives up."""
    if stop.is_set():
        raise WorkspaceUnreadable("/diff was given up while it read the workspace.")


def blob_id(content: bytes, object_format: str) -> str:
    """The id git gives ``content`` as a blob."""
    digest = _new_digest(object_format)
    digest.update(b"blob %d\0" % len(content))
    digest.update(content)
    return digest.hexdigest()


def _new_digest(object_format: str) -> hashlib._Hash:
    return hashlib.sha256() if object_format == "sha256" else hashlib.sha1()


def _read_small(dir_fd: int, relative: str) -> bytes:
    """A small file at ``relative`` (slash-separated) under ``dir_fd``, never followed."""
    parts = relative.split("/")
    fds: list[int] = []
    try:
        current = dir_fd
        for part in parts[:-1]:
            if part in ("", ".", ".."):
                raise WorkspaceUnreadable(f"bad path {relative!r}")
            current = os.open(part, DIR_FLAGS, dir_fd=current)
            fds.append(current)
        fd = os.open(parts[-1], _READ_FLAGS, dir_fd=current)
        fds.append(fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise WorkspaceUnreadable(f"{relative} is not a regular file")
        return _read_all(fd, _SMALL_FILE)
    except OSError as exc:
        raise WorkspaceUnreadable(f"cannot read .git/{relative} ({exc.strerror})") from exc
    finally:
        for fd in fds:
            os.close(fd)


def _read_all(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, min(remaining, 1024 * 1024))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


@contextlib.contextmanager
def _opened_dir(dir_fd: int, name: str) -> Iterator[int]:
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise WorkspaceUnreadable(f"cannot read .git's {name} ({exc.strerror})") from exc
    try:
        yield fd
    finally:
        os.close(fd)


def _link_regular(dir_fd: int, name: str, target: Path, budget: _CopyBudget) -> None:
    """Hard-link the regular file ``name`` to ``target``, or copy it from its descriptor.

    The entry is opened no-follow and checked on the descriptor. Linking goes by name (the
    kernel links the entry itself, never following it), so the agent could swap the name
    in between: the new link, in a directory only the daemon writes, must then be the very
    inode checked, or it is removed and the checked descriptor's bytes copied instead, as
    they are where the kernel refuses the link (protected_hardlinks, another filesystem,
    an inode with 65,000 links already). The agent decides when a link is refused and how
    large a file is (a sparse terabyte costs it no quota), so a copy takes at most the size
    checked, from the ``budget`` of all copies, and an inode is taken once whatever its
    number of names. Links and special files are skipped."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return
    try:
        checked = os.fstat(fd)
        identity = (checked.st_dev, checked.st_ino)
        if not stat.S_ISREG(checked.st_mode) or identity in budget.taken:
            return
        budget.taken.add(identity)
        target.parent.mkdir(mode=0o700, exist_ok=True)
        try:
            os.link(name, target, src_dir_fd=dir_fd, follow_symlinks=False)
            linked = os.lstat(target)
            if (linked.st_dev, linked.st_ino) == identity:
                return
            target.unlink()
        except OSError:
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
        if checked.st_size > budget.left:
            raise WorkspaceUnreadable(
                f"The workspace's .git/objects holds files that cannot be linked and are "
                f"too large to copy (over {MAX_COPIED_BYTES // (1024 * 1024):,} MB): "
                "not compared."
            )
        budget.left -= checked.st_size
        with open(target, "xb") as out:
            stop = budget.stop
            copy_at_most(fd, out.fileno(), checked.st_size, lambda: given_up(stop))
    finally:
        os.close(fd)
