"""The daemon's git mirror of the target repo (``<state_dir>/git-mirror``) broken between
two tasks: a fetch killed mid-way leaves a ref's lock file, ``objects/`` is lost, the config
is garbled. Every later task used to fail the same way ("Could not prepare the workspace");
now a failed fetch, or a failed clone of a workspace from the mirror, clones the mirror
anew once and the task goes on. Where origin itself is what failed, the mirror is kept."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway_bot.core.workspaces import GitError, Workspaces
from gateway_bot.sandbox.host_files import HostContextFiles
from tests.conftest import GIT_IDENTITY, GatewayProcess, make_repo, write_config
from tests.fake_anthropic import FakeAnthropic
from tests.fast_agent import fast_agent_sections

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

    for repairs, breakage in enumerate((_garble_config, _lose_objects, _leave_a_ref_lock), 1):
        breakage(mirror, origin)
        chat.send(f"after {breakage.__name__}")
        chat.expect(rf"^agent> Echo: after {breakage.__name__}$")
        _wait_for_log(chat, REPAIRED, repairs)
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


async def test_with_origin_unreachable_the_mirror_is_kept(tmp_path: Path) -> None:
    """A fetch also fails when origin is down: the new clone then fails too, and the mirror
    the daemon had stays (its files still serve reads), not a half-made one."""
    origin = make_repo(tmp_path / "origin")
    workspaces = Workspaces(tmp_path / "state", str(origin), None)
    await workspaces.refresh_mirror()
    origin.rename(tmp_path / "origin-gone")

    with pytest.raises(GitError) as failed:
        await workspaces.refresh_mirror()

    assert str(failed.value).startswith("git remote failed: "), failed.value
    assert "; cloning the mirror anew failed too: git clone failed: " in str(failed.value)

    assert await workspaces.read_default_branch_file("README.md") == "# target repo\n"
    assert not (tmp_path / "state" / "git-mirror.partial").exists()
