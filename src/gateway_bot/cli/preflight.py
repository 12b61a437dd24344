"""What ``run``, ``chat`` and ``check`` make sure of before starting anything, so a user's
mistake is one line naming it (exit 2) instead of a traceback from deep in the start:

- the state directory can be made and written (a path that is a file, a read-only disk);
- no other daemon serves the same state directory (without ``ha`` two daemons would both
  listen on every channel and both run the same conversations: double replies);
- a repo given as a local path exists, is a git repository (its top) and has a commit.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import subprocess
import tempfile
from pathlib import Path

LOCK_NAME = "daemon.lock"


def state_dir_problem(state_dir: Path, *, create: bool = True) -> str | None:
    """Why ``state_dir`` cannot hold the state, or None. ``create``: make it if missing
    (``run``, ``chat``); else (``check``) its nearest existing ancestor must be writable."""
    try:
        if create:
            state_dir.mkdir(parents=True, exist_ok=True)
        existing = state_dir
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(existing))
        # A real write: os.access says yes to root on a read-only mount.
        with tempfile.TemporaryFile(dir=existing, prefix=".write-check-"):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if isinstance(exc, FileExistsError) or exc.errno == errno.ENOTDIR:
            reason = "a file (or a path through a file) is in the way"
        return (
            f"The state directory {state_dir} cannot be used: {reason} (state_dir in the config)."
        )
    return None


class DaemonLock:
    """An exclusive ``flock`` on ``<state_dir>/daemon.lock`` held for the process's life.

    The kernel drops it when the process ends, however it ends (``kill -9`` included), so a
    stale lock never blocks a restart. The file keeps the holder's pid for the message."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> str | None:
        """Take the lock; the reason it is taken by another process (or cannot be taken:
        something other than a plain file is at its path), or None."""
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            # Never through a link: the lock is written (our pid), so a link planted there
            # would have us truncate whatever it points at. O_NONBLOCK: a FIFO there must
            # not hang the start.
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return self._not_a_file("it is a symbolic link")
            return self._not_a_file((exc.strerror or str(exc)).lower())
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return self._not_a_file("it is not a regular file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            return (
                f"Another gateway-bot (pid {holder}) already serves the state directory "
                f"{self.path.parent}: stop it first, or give this config its own state_dir "
                "(ha.enabled lets several daemons share one)."
            )
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return None

    def _not_a_file(self, reason: str) -> str:
        return (
            f"The lock file {self.path} cannot be used ({reason}): it must be a plain file, "
            "never a link. Remove whatever is there (gateway-bot makes the file itself) and "
            "start again."
        )

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def local_repo_problem(url: str) -> str | None:
    """For ``repo.url`` given as a local path (absolute by now): why it cannot be cloned.

    Each used to start fine and fail the first message with git's words: "repository ...
    does not exist" for a directory that is no repo (or only a folder inside one), "invalid
    object name 'HEAD'" for a repo made by ``git init`` with nothing committed yet."""
    if not url.startswith("/"):
        return None  # a URL or host:path: only the clone can tell
    path = Path(url)
    if not path.is_dir():
        return f"repo.url {url} is not a directory: no repo to clone there."
    found = _git(path, "rev-parse", "--is-bare-repository", "--absolute-git-dir")
    if found.returncode != 0:
        said = (found.stderr.strip().splitlines() or ["no answer"])[-1]
        return (
            f"repo.url {url} is not a git repository ({said}): name a repo's top directory, "
            "or run `git init` there and commit."
        )
    bare, git_dir = [*found.stdout.split("\n"), "", ""][:2]
    if not (path / ".git").exists() and Path(git_dir.strip()) != path.resolve():
        top = _git(path, "rev-parse", "--show-toplevel").stdout.strip()
        where = f": name its top, {top}" if top and bare.strip() == "false" else ""
        return f"repo.url {url} is a directory inside a git repository, not its top{where}."
    if not _git(path, "rev-list", "-n", "1", "--all").stdout.strip():
        return (
            f"repo.url {url} has no commits yet: commit something first (each conversation "
            "works on a clone of it), e.g. `git commit --allow-empty -m start`."
        )
    return None


def _git(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A read-only git question about the operator's own repo (not an agent's workspace)."""
    argv = ["git", "-C", str(path), *args]
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:  # no git, a hung mount
        return subprocess.CompletedProcess(argv, 1, "", f"git could not answer: {exc}")


def other_repos_state_problem(state_dir: Path, url: str, *, how: str) -> str | None:
    """Why ``state_dir`` cannot serve ``url``: its git mirror (``<state_dir>/git-mirror``,
    cloned from the repo of the first run there) is another repo's. Conversations there
    would go on in that repo's workspaces while the banner named the new one (``chat`` in a
    second project, or an edited ``repo.url``). ``how``: how to give a state dir."""
    mirror_config = state_dir / "git-mirror" / "config"
    if not mirror_config.is_file():
        return None
    found = _git(state_dir, "config", "--file", str(mirror_config), "--get", "remote.origin.url")
    origin = found.stdout.strip()
    if found.returncode != 0 or not origin or _same_repo(origin, url):
        return None
    shown_origin, shown_url = _without_userinfo(origin), _without_userinfo(url)
    return (
        f"The state directory {state_dir} holds the work on {shown_origin} (its git mirror), "
        f"not on {shown_url}: conversations there would go on in its workspaces. The same "
        f"repo at a new address: `git --git-dir={state_dir / 'git-mirror'} remote set-url "
        f"origin NEW-URL`. Another repo: give it its own state directory ({how}), or move "
        f"{state_dir} away to start afresh."
    )


_USERINFO = re.compile(r"^([a-z][a-z0-9+.-]*://)[^/@]*@", re.IGNORECASE)


def _without_userinfo(url: str) -> str:
    """A URL without its ``user:token@`` (a token rotated in ``repo.url`` is the same repo,
    and a message must not print it)."""
    return _USERINFO.sub(r"\1", url)


def _same_repo(origin: str, url: str) -> bool:
    def plain(text: str) -> str:
        text = _without_userinfo(text).rstrip("/")
        text = text.removesuffix(".git") if not text.endswith("/.git") else text
        return str(Path(text).resolve()) if text.startswith("/") else text

    return plain(origin) == plain(url)
