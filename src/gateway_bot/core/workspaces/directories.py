"""Per-conversation directories and the git mirror they are cloned from.

Layout under the state dir::

    git-mirror/                 bare mirror of the configured repo, fetched before each task
    git-mirror.lock             held while it is cloned or fetched (replicas share the dir)
    conversations/<id>/
        workspace/              full clone (no alternates: it must work mounted alone)
        home/                   the agent's home (its session state lives here)
        inbox/ outbox/ storage/ files in, files out, scratch that outlives tasks
        sent/                   outbox files already delivered, by task id
        incoming/               downloads being written, before they are linked into inbox/
        events.jsonl            the agent's raw stream, append-only, never mounted
        network.log             every request the agent's sandbox allowed or blocked

The five directories the agent's environment holds (workspace, home, inbox, outbox,
storage) are the sandbox's: they are named here (``execution_context``) for a sandbox that
keeps them on this machine, and read or written only through ``Sandbox.files`` (the
``ContextFiles`` protocol). The rest of the conversation's directory is the daemon's own.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from gateway_bot.config.yaml_tags import ConfigError
from gateway_bot.core.schedules.request_file import REQUEST_FILE
from gateway_bot.core.workspaces.checkout_size import CheckoutTooBig, refuse_checkout_over
from gateway_bot.sandbox import shared_lock
from gateway_bot.sandbox.base import ExecutionContext
from gateway_bot.sandbox.context_files import ContextFiles, GitOrigin, WorkspaceSetupFailed
from gateway_bot.sandbox.host_commands import remove_trees, run_git

log = logging.getLogger(__name__)

MAX_REPO_FILE_BYTES = 256 * 1024
"""The largest ``.gateway/`` file read from the default branch (config, allowlist,
Containerfile)."""
MIRROR_LOCK = "git-mirror.lock"
"""Beside the mirror in the state directory: held while the mirror is cloned or fetched."""


class GitError(Exception):
    """A git command failed; the message carries git's own words."""


@dataclass(frozen=True)
class ConversationDirs:
    root: Path

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def inbox(self) -> Path:
        return self.root / "inbox"

    @property
    def outbox(self) -> Path:
        return self.root / "outbox"

    @property
    def storage(self) -> Path:
        return self.root / "storage"

    @property
    def sent(self) -> Path:
        return self.root / "sent"

    @property
    def events(self) -> Path:
        return self.root / "events.jsonl"

    @property
    def network_log(self) -> Path:
        """The sandbox's log of allowed and blocked requests (a link to the proxy's file)."""
        return self.root / "network.log"


class Workspaces:
    def __init__(self, state_dir: Path, repo_url: str, default_branch: str | None) -> None:
        self._state_dir = state_dir
        self._repo_url = repo_url
        self._branch = default_branch
        self._mirror = state_dir / "git-mirror"
        self._mirror_lock = asyncio.Lock()
        self._fetches_begun = 0
        self._fetched = 0
        """The number of the last fetch that ended well (fetches are numbered as begun)."""

    def dirs(self, conversation_id: str) -> ConversationDirs:
        return ConversationDirs(self._state_dir / "conversations" / conversation_id)

    async def refresh_mirror(self) -> None:
        """Clone the mirror on first use, fetch it afterwards. Serialised: one git at a time,
        in this process (its lock) and across the processes sharing the state directory
        (replicas, ``shared_lock``): two replicas cloning into the one ``git-mirror.partial``
        at once removed each other's files, failed the task and could leave a mirror that
        failed every task after it.
        Shared: a caller is served by any fetch begun after it asked, so the callers that
        wait while one fetch runs are all served by the next (every task fetches first: 50
        tasks after a restart made 50 fetches, one after the other, now a few)."""
        wanted = self._fetches_begun + 1
        async with self._mirror_lock:
            if self._fetched >= wanted:
                return
            self._fetches_begun += 1
            begun = self._fetches_begun
            async with shared_lock.held(self._state_dir / MIRROR_LOCK):
                await self._fetch_mirror()
            self._fetched = begun

    async def _fetch_mirror(self) -> None:
        have_mirror = (self._mirror / "HEAD").exists()
        if not have_mirror and not await asyncio.to_thread(self._put_back_replaced):
            await self._clone_mirror()
            return
        failure = await self._fetch()
        if failure is None:
            return
        if cleared := await asyncio.to_thread(_clear_stale_locks, self._mirror):
            # Under the locks no git of the daemon's runs on the mirror: these were left by
            # one killed mid-fetch, and a fetch that must move those refs refuses.
            log.warning("the git mirror's fetch failed; removed stale locks %s", cleared)
            if (failure := await self._fetch()) is None:
                return
        if await self._mirror_reads():
            raise failure  # a sound mirror: origin (or what it serves) is what failed
        await self._clone_mirror_again("its fetch", failure)

    async def _fetch(self) -> GitError | None:
        """The mirror's fetch: how it failed, None when it went well."""
        try:
            await _git(self._in_mirror, "remote", "update", "--prune")
        except GitError as exc:
            return exc
        return None

    async def _mirror_reads(self) -> bool:
        """Whether the mirror is a repository whose HEAD's tree can be read: a garbled
        config, lost ``objects/`` or ``refs/`` fail it. Only a mirror failing it is cloned
        anew: a fetch failing for origin's sake (unreachable, a ref name this file system
        cannot hold) or a workspace clone failing for the repo's own content (a file name
        too long to check out, a configured branch that does not exist) would otherwise
        make every task download the whole repo again, holding the lock every task and
        every replica waits on."""
        try:
            await _git(self._in_mirror, "rev-parse", "--verify", "--quiet", "HEAD^{tree}")
        except GitError:
            return False
        return True

    async def _clone_mirror_again(self, what: str, failure: Exception) -> None:
        """A mirror that is no readable repository any more is cloned anew, once (every
        later task failed the same way). Where origin is also unreachable, the clone fails
        and the mirror stays as it was. The caller holds both locks."""
        log.warning(
            "the git mirror %s looks broken (%s failed: %s): cloning it again",
            self._mirror, what, failure,
        )  # fmt: skip
        try:
            await self._clone_mirror()
        except GitError as exc:
            raise GitError(f"{failure}; cloning the mirror anew failed too: {exc}") from exc
        log.info("the git mirror %s was cloned again", self._mirror)

    async def _clone_mirror(self) -> None:
        """Clone origin beside the mirror and only then put it in the mirror's place (under
        the locks anything left beside it is debris of a crash mid-clone or mid-swap). The
        swap is one call on one thread: a task cancelled while it runs cannot leave the
        mirror renamed away and the new one beside it."""
        partial = self._mirror.with_name("git-mirror.partial")
        replaced = self._mirror.with_name("git-mirror.replaced")
        for debris in (partial, replaced):
            await asyncio.to_thread(_remove_debris, debris)
        try:
            await _git("clone", "--mirror", "--quiet", "--", self._repo_url, str(partial))
        except BaseException:
            await asyncio.shield(asyncio.to_thread(_remove_debris, partial))
            raise
        await asyncio.to_thread(self._swap_in, partial, replaced)

    def _swap_in(self, partial: Path, replaced: Path) -> None:
        if os.path.lexists(self._mirror):
            self._mirror.rename(replaced)
        partial.rename(self._mirror)
        _remove_debris(replaced)

    def _put_back_replaced(self) -> bool:
        """A daemon killed mid-swap leaves the old mirror at ``git-mirror.replaced`` and none
        in its place: put it back (a fetch repairs it if it was the broken one) rather than
        depend on origin being reachable right now. Whether it did."""
        replaced = self._mirror.with_name("git-mirror.replaced")
        if os.path.lexists(self._mirror) or not (replaced / "HEAD").is_file():
            return False
        replaced.rename(self._mirror)
        log.warning("the git mirror %s was put back from %s", self._mirror, replaced.name)
        return True

    @property
    def _in_mirror(self) -> str:
        """git's option for the mirror: ``--git-dir``, not ``-C``, so that a mirror broken
        into no repository at all fails, instead of git finding one in a parent directory
        (a state_dir inside a checkout) and fetching or reading that one."""
        return f"--git-dir={self._mirror}"

    def execution_context(self, conversation_id: str) -> ExecutionContext:
        """The conversation's execution context, its directories where a sandbox keeping
        them on this machine keeps them (no env, allowlist or image: the executor adds
        those)."""
        dirs = self.dirs(conversation_id)
        return ExecutionContext(
            id=conversation_id,
            workspace=dirs.workspace,
            home=dirs.home,
            inbox=dirs.inbox,
            outbox=dirs.outbox,
            storage=dirs.storage,
            network_log=dirs.network_log,
        )

    async def prepare(
        self, conversation_id: str, files: ContextFiles, max_checkout_bytes: int | None = None
    ) -> ConversationDirs:
        """Make the conversation's own directory, and have the sandbox make the context's
        and clone the workspace from the mirror (once; never rebased). A clone that fails
        is tried once more on a mirror cloned anew when the mirror no longer reads (or on
        the one another task's repair put in place meanwhile). A repo whose files would
        take more than ``max_checkout_bytes`` is not checked out. Raises
        WorkspaceSetupFailed, or GitError when the mirror's new clone failed."""
        dirs = self.dirs(conversation_id)
        await asyncio.to_thread(dirs.root.mkdir, parents=True, exist_ok=True)
        if max_checkout_bytes is not None and not await files.workspace_exists():
            await self._refuse_checkout_over(max_checkout_bytes)
        origin = GitOrigin(self._mirror, self._repo_url, self._branch)
        cloned_from = await asyncio.to_thread(_identity, self._mirror)
        try:
            await files.ensure_workspace(origin)
        except WorkspaceSetupFailed as exc:
            async with self._mirror_lock, shared_lock.held(self._state_dir / MIRROR_LOCK):
                if await asyncio.to_thread(_identity, self._mirror) == cloned_from:
                    if await self._mirror_reads():
                        raise  # the mirror is sound: the workspace's own failure
                    await self._clone_mirror_again("a workspace's clone from it", exc)
            await files.ensure_workspace(origin)
        return dirs

    async def _refuse_checkout_over(self, limit: int) -> None:
        """Refuse a checkout that would pass ``limit`` (``checkout_size``). A listing that
        fails (a mirror being repaired by another task) leaves the decision to the clone,
        which fails or repairs on the same mirror."""
        try:
            await refuse_checkout_over(self._in_mirror, self._branch_ref, limit)
        except CheckoutTooBig as exc:
            raise WorkspaceSetupFailed(str(exc)) from exc
        except OSError as exc:
            log.warning("measuring the checkout failed (%s); the clone decides", exc)

    @property
    def _branch_ref(self) -> str:
        """The default branch as a full ref: a bare name lets git prefer a tag of the same
        name (``refs/tags/main`` over ``refs/heads/main``), which anyone who can push a tag
        could make point at a harmless tree while the clone (``--branch``) takes the
        branch, or at another ``.gateway/config.yaml`` than the branch's."""
        return f"refs/heads/{self._branch}" if self._branch else "HEAD"

    async def take_outbox(
        self, conversation_id: str, task_id: str, files: ContextFiles
    ) -> list[Path]:
        """Move the files the agent left in outbox/ to sent/<task id>/ and return them.

        Moving them out at once means each file goes out with exactly one reply, and a reply
        re-sent after a crash still finds its files. Symlinks and special files are left
        behind: a link could point at a host file the agent must not exfiltrate. Channels
        read only the copies in sent/, which the sandbox cannot see. ``schedule.json`` is
        never taken: it is the agent's schedule request (``core/schedules/request_file.py``).
        """
        into = self.dirs(conversation_id).sent / task_id
        return await files.take_outbox(into, frozenset({REQUEST_FILE}))

    async def idle_conversations(self, idle_s: float) -> list[str]:
        """Conversations whose directory saw no activity (a task's events, a new file at its
        top level) for ``idle_s`` seconds: candidates for garbage collection."""
        return await asyncio.to_thread(self._idle_conversations, idle_s)

    def _idle_conversations(self, idle_s: float) -> list[str]:
        root = self._state_dir / "conversations"
        if not root.is_dir():
            return []
        cutoff = time.time() - idle_s
        idle = []
        for directory in root.iterdir():
            dirs = ConversationDirs(directory)
            stamps = [p.stat().st_mtime for p in (dirs.root, dirs.events) if p.exists()]
            if directory.is_dir() and max(stamps, default=0.0) < cutoff:
                idle.append(directory.name)
        return sorted(idle)

    async def remove(self, conversation_id: str) -> None:
        """Delete what the daemon keeps of a conversation (event log, sent files, and the
        directory the host-path sandboxes keep their files in, after the sandbox's own
        ``ContextFiles.remove``), never following a link (``remove_trees``)."""
        await remove_trees([self.dirs(conversation_id).root])

    @property
    def mirror(self) -> Path:
        """The bare mirror: origin as the daemon last fetched it (daemon-written only)."""
        return self._mirror

    async def upstream_branch(self) -> tuple[str, str] | None:
        """(name, commit id) of origin's default branch in the mirror, None before the
        first clone: what "not pushed yet" is measured against."""
        if not (self._mirror / "HEAD").exists():
            return None
        try:
            name = self._branch
            if name is None:
                found = await _git(self._in_mirror, "symbolic-ref", "--short", "HEAD")
                name = found.strip()
            commit = await _git(
                self._in_mirror, "rev-parse", "--verify", f"refs/heads/{name}^{{commit}}"
            )
        except GitError:
            return None
        return name, commit.strip()

    async def read_default_branch_file(self, path: str) -> str | None:
        """A file's text on the default branch of the mirror, or None when it is absent.
        The repo is not the operator's: a file over ``MAX_REPO_FILE_BYTES`` (or a directory
        where a file belongs) is a ConfigError, its size asked of git before anything is
        read (a 2 GB config.yaml was read whole into the daemon, then parsed on its loop)."""
        listed = await _git(self._in_mirror, "ls-tree", "-l", "-z", self._branch_ref, "--", path)
        entry = next((e for e in listed.split("\0") if e.endswith(f"\t{path}")), None)
        if entry is None:
            return None
        _mode, kind, object_id, size = entry.partition("\t")[0].split()
        if kind != "blob":
            raise ConfigError(path, [f"is a {kind}, not a file: not read"])
        if int(size) > MAX_REPO_FILE_BYTES:
            raise ConfigError(
                path,
                [
                    f"has {int(size):,} bytes, more than the {MAX_REPO_FILE_BYTES:,} read "
                    "(hint: keep it short): not read"
                ],
            )
        return await _git(self._in_mirror, "cat-file", "blob", object_id)


async def _git(*args: str) -> str:
    return await run_git(*args, error=GitError)


def _identity(directory: Path) -> tuple[int, int] | None:
    """Which directory is at this path (a mirror cloned anew is another one), None if none."""
    try:
        found = os.stat(directory)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _clear_stale_locks(mirror: Path) -> list[str]:
    """Remove the lock files a git killed mid-fetch leaves in the mirror (its top level and
    ``refs/``, never following a link); the caller holds the mirror's locks. Their names."""
    found = [mirror / name for name in ("HEAD.lock", "config.lock", "packed-refs.lock")]
    for directory, _, names in os.walk(mirror / "refs"):
        found += [Path(directory, name) for name in names if name.endswith(".lock")]
    cleared = []
    for lock in found:
        try:
            lock.unlink()
        except FileNotFoundError:
            continue
        cleared.append(str(lock.relative_to(mirror)))
    return cleared


def _remove_debris(path: Path) -> None:
    """Remove what a crash left at ``path`` without following a link there (a link is
    removed, not its target)."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(found.st_mode):
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
