"""Attacks on the measurement of a checkout before it is made (core/workspaces/checkout_size.py): a
repo whose trees share subtrees lists millions of files from a few KB of objects, and a tag
named like the default branch points the measurement (and the repo config) elsewhere."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from gateway_bot.config.repo import REPO_CONFIG_PATH
from gateway_bot.core.workspaces.directories import Workspaces
from gateway_bot.sandbox.context_files import WorkspaceSetupFailed
from gateway_bot.sandbox.host_files import HostContextFiles
from tests.conftest import GIT_IDENTITY, make_repo


def _git(repo: Path, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *GIT_IDENTITY, *args],
        input=stdin, text=True, capture_output=True, check=True,
    ).stdout.strip()  # fmt: skip


def _commit_tree(repo: Path, tree: str, message: str) -> str:
    return _git(repo, "commit-tree", tree, "-p", "HEAD", "-m", message)


def _tree_bomb(repo: Path, levels: int) -> str:
    """A tree listing 10**(levels + 1) empty files from levels + 1 tree objects: each
    level holds the level below ten times."""
    blob = _git(repo, "hash-object", "-w", "--stdin", stdin="")
    tree = _git(repo, "mktree", stdin="".join(f"100644 blob {blob}\tf{n}\n" for n in range(10)))
    for _level in range(levels):
        tree = _git(repo, "mktree", stdin="".join(f"040000 tree {tree}\td{n}\n" for n in range(10)))
    return tree


def _prepare(workspaces: Workspaces, limit: int) -> None:
    async def prepare() -> None:
        await workspaces.refresh_mirror()
        files = HostContextFiles.of(workspaces.execution_context("c1"))
        await workspaces.prepare("c1", files, max_checkout_bytes=limit)

    asyncio.run(prepare())


def test_a_tree_bomb_of_empty_files_is_refused_without_listing_it_whole(tmp_path: Path) -> None:
    # 10**9 empty files (80 GB of listing) from 10 tree objects: the listing used to be read
    # whole into the daemon (out of memory, at every start's recovery of the task), and
    # summed to 0 bytes, then checked out.
    origin = make_repo(tmp_path / "origin")
    bomb = _commit_tree(origin, _tree_bomb(origin, levels=8), "Add a few files")
    _git(origin, "update-ref", "refs/heads/main", bomb)
    workspaces = Workspaces(tmp_path / "state", str(origin), None)

    with pytest.raises(WorkspaceSetupFailed) as refused:
        _prepare(workspaces, limit=100 * 1024**2)
    assert str(refused.value).startswith("the repo's files take ")
    assert str(refused.value).endswith(
        "MB or more, past the conversation's disk limit of 100 MB: not checked out"
    )
    assert not workspaces.execution_context("c1").workspace.exists()
    # A repo of a sane size under the same limit is checked out.
    sane = _commit_tree(origin, _tree_bomb(origin, levels=1), "Only 100 files")
    _git(origin, "update-ref", "refs/heads/main", sane)
    _prepare(workspaces, limit=100 * 1024**2)
    assert (workspaces.execution_context("c1").workspace / "d9" / "f9").is_file()


def test_a_tag_named_like_the_branch_measures_and_configures_nothing(tmp_path: Path) -> None:
    # A tag "main" made git's ls-tree read the tag's tree (a bare name prefers
    # refs/tags/main), while the clone took the branch: the tag's small tree passed the
    # size check, and its .gateway/config.yaml was read as the repo's.
    origin = make_repo(tmp_path / "origin", {REPO_CONFIG_PATH: "model: the-branchs-model\n"})
    first = _git(origin, "rev-parse", "HEAD")
    tag_config = _git(origin, "hash-object", "-w", "--stdin", stdin="model: the-tags-model\n")
    gateway_dir = _git(origin, "mktree", stdin=f"100644 blob {tag_config}\tconfig.yaml\n")
    decoy = _git(origin, "mktree", stdin=f"040000 tree {gateway_dir}\t.gateway\n")
    _git(origin, "tag", "main", _commit_tree(origin, decoy, "A harmless tree"))
    big = _commit_tree(origin, _tree_bomb(origin, levels=4), "100,000 files")
    _git(origin, "update-ref", "refs/heads/main", big)
    workspaces = Workspaces(tmp_path / "state", str(origin), "main")

    with pytest.raises(WorkspaceSetupFailed, match="past the conversation's disk limit"):
        _prepare(workspaces, limit=100 * 1024**2)

    _git(origin, "update-ref", "refs/heads/main", first)
    asyncio.run(workspaces.refresh_mirror())
    assert asyncio.run(workspaces.read_default_branch_file(REPO_CONFIG_PATH)) == (
        "model: the-branchs-model\n"
    )
