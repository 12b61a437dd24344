"""The daemon's git mirror of the target repo (``<state_dir>/git-mirror``) broken between
two tasks: a fetch killed mid-way leaves a ref's lock file, ``objects/`` is lost, the config
is garbled. Every later task used to fail the same way ("Could not prepare the workspace");
now stale locks are removed, and a mirror that no longer reads is cloned anew once, and the
task goes on. A failure that is not the mirror's (origin unreachable, the repo's own content
or a branch that does not exist) keeps the mirror and costs no new clone: a hostile repo
must not make every task download it again under the lock every task waits on."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway_bot.core.workspaces.directories import GitError, Workspaces
from gateway_bot.sandbox.context_files import WorkspaceSetupFailed
from gateway_bot.sandbox.host_files import HostContextFiles
from tests.conftest import GIT_IDENTITY, GatewayProcess, make_repo, write_config
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fast_agent import fast_agent_sections

REPAIRED = "cloning it again"


def _push(origin: Path, name: str) -> None:
    (origin / name).write_text(f"{name}\n")
    subprocess.run(["git", "-C", str(origin), "add", name], check=True)
    subprocess.run(["git", "-C", str(origin), *GIT_IDENTITY, "commit", "-qm", name], check=True)


def _garble_config(mirror: Path, origin: Path) -> None:
    (mirror / "config").write_text('[remote "origin\n\turl = garbled\n')


def _lose_objects(mirror: Path, origin: Path) -> None:
    shutil.rmtree(mirror / "objects")


def _leave_a_ref_lock(mirror: Path, origin: Path) -> None:
    """What a fetch killed between writing a ref's lock and renaming it leaves: the next
    fetch that must move that ref refuses ("unable to update local ref")."""
    (mirror / "refs" / "heads").mkdir(parents=True, exist_ok=True)
    (mirror / "refs" / "heads" / "main.lock").write_text("")
    _push(origin, "after-the-kill.txt")


def _wait_for_log(chat: GatewayProcess, text: str, times: int) -> None:
    """The daemon's log (its stderr, read on a thread) says ``text`` ``times`` times."""
    deadline = time.monotonic() + 30
    while chat.stderr.count(text) < times:
        assert time.monotonic() < deadline, f"{text!r} not logged {times} times:\n{chat.stderr}"
        time.sleep(0.05)
    assert chat.stderr.count(text) == times, chat.stderr


def test_tasks_after_the_mirror_broke_still_get_their_answer(
    gateway: Callable[..., GatewayProcess], tmp_path: Path, fake_api: FakeAnthropic
) -> None:
    origin = make_repo(tmp_path / "origin")
    config = write_config(tmp_path, origin, fake_api, **fast_agent_sections(tmp_path))
    mirror = tmp_path / "state" / "git-mirror"
    chat = gateway("chat", "--config", str(config))
    chat.send("before anything broke")
    chat.expect(r"^agent> Echo: before anything broke$")

    repairs = ((_garble_config, REPAIRED, 1), (_lose_objects, REPAIRED, 2),
               (_leave_a_ref_lock, "removed stale locks ['refs/heads/main.lock']", 1))  # fmt: skip
    for breakage, logged, times in repairs:
        breakage(mirror, origin)
        chat.send(f"after {breakage.__name__}")
        chat.expect(rf"^agent> Echo: after {breakage.__name__}$")
        _wait_for_log(chat, logged, times)
    assert chat.stderr.count(REPAIRED) == 2, "a stale lock is removed, not a reason to clone"
    chat.finish()
    assert chat.count("Could not prepare the workspace") == 0
    shown = subprocess.run(
        ["git", f"--git-dir={mirror}", "show", "main:after-the-kill.txt"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert shown.stdout == "after-the-kill.txt\n", "the mirror has origin's latest commit"


async def test_a_workspace_clone_failing_on_the_mirror_clones_the_mirror_again(
    tmp_path: Path,
) -> None:
    """The mirror breaks after this task's fetch (another process, a disk fault) and before
    its conversation's workspace is cloned from it: the clone is tried once more on a new
    mirror."""
    origin = make_repo(tmp_path / "origin")
    workspaces = Workspaces(tmp_path / "state", str(origin), None)
    await workspaces.refresh_mirror()
    _lose_objects(workspaces.mirror, origin)

    context = workspaces.execution_context("fresh")
    await workspaces.prepare("fresh", HostContextFiles.of(context))

    assert (context.workspace / "README.md").read_text() == "# target repo\n"
    assert await workspaces.read_default_branch_file("README.md") == "# target repo\n"


async def test_with_origin_unreachable_the_mirror_is_kept_and_not_cloned_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A fetch also fails when origin is down: the mirror reads fine, so it is kept as it
    is (its files still serve reads) and no new clone is tried."""
    origin = make_repo(tmp_path / "origin")
    workspaces = Workspaces(tmp_path / "state", str(origin), None)
    await workspaces.refresh_mirror()
    before = _identity(workspaces.mirror)
    origin.rename(tmp_path / "origin-gone")

    with pytest.raises(GitError) as failed:
        await workspaces.refresh_mirror()

    assert str(failed.value).startswith("git remote failed: "), failed.value
    assert REPAIRED not in caplog.text
    assert _identity(workspaces.mirror) == before
    assert await workspaces.read_default_branch_file("README.md") == "# target repo\n"
    assert not (tmp_path / "state" / "git-mirror.partial").exists()


async def test_a_workspace_failing_for_the_repos_own_sake_costs_no_new_mirror(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A repo whose default branch holds a file name no file system takes (a push away for
    anyone who can push) makes every new workspace's checkout fail: the mirror is sound, so
    the task fails at once, naming git's error, and the mirror is not downloaded anew."""
    origin = make_repo(tmp_path / "origin")
    _commit_a_name_too_long(origin)
    workspaces = Workspaces(tmp_path / "state", str(origin), None)
    await workspaces.refresh_mirror()
    before = _identity(workspaces.mirror)

    context = workspaces.execution_context("hostile")
    with pytest.raises(WorkspaceSetupFailed, match="File name too long"):
        await workspaces.prepare("hostile", HostContextFiles.of(context))

    assert REPAIRED not in caplog.text
    assert _identity(workspaces.mirror) == before


def _commit_a_name_too_long(origin: Path) -> None:
    """Origin's main gains a file whose name is 300 bytes: git stores it, no checkout can."""

    def git(*args: str, given: str | None = None) -> str:
        return subprocess.run(
            ["git", "-C", str(origin), *GIT_IDENTITY, *args],
            input=given, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip

    blob = git("hash-object", "-w", "--stdin", given="hostile\n")
    listing = git("ls-tree", "HEAD^{tree}") + f"\n100644 blob {blob}\t{'z' * 300}\n"
    tree = git("mktree", given=listing)
    commit = git("commit-tree", tree, "-p", "HEAD", "-m", "a name too long to check out")
    git("update-ref", "refs/heads/main", commit)


async def test_a_daemon_killed_mid_swap_gets_its_mirror_back_with_origin_down(
    tmp_path: Path,
) -> None:
    """Killed between moving the old mirror aside and moving the new one in: the next start
    puts the old one back instead of needing origin right then (and removing both)."""
    origin = make_repo(tmp_path / "origin")
    state = tmp_path / "state"
    await Workspaces(state, str(origin), None).refresh_mirror()
    (state / "git-mirror").rename(state / "git-mirror.replaced")
    origin.rename(tmp_path / "origin-gone")

    workspaces = Workspaces(state, str(origin), None)
    with pytest.raises(GitError, match=r"^git remote failed: "):
        await workspaces.refresh_mirror()

    assert await workspaces.read_default_branch_file("README.md") == "# target repo\n"
    assert not (state / "git-mirror.replaced").exists()


async def test_debris_that_is_a_link_is_removed_not_followed(tmp_path: Path) -> None:
    """A link left where the new clone goes (``git-mirror.partial``) is removed, and what it
    points at is kept."""
    origin = make_repo(tmp_path / "origin")
    state = tmp_path / "state"
    workspaces = Workspaces(state, str(origin), None)
    await workspaces.refresh_mirror()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep\n")
    (state / "git-mirror.partial").symlink_to(elsewhere)
    _garble_config(workspaces.mirror, origin)

    await workspaces.refresh_mirror()

    assert (elsewhere / "keep.txt").read_text() == "keep\n"
    assert await workspaces.read_default_branch_file("README.md") == "# target repo\n"


def _identity(directory: Path) -> tuple[int, int]:
    found = directory.stat()
    return found.st_dev, found.st_ino
