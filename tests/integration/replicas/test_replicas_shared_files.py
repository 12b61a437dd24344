"""Replicas share one state directory (decision 0094), and with it files that every replica
changes; an ``asyncio.Lock`` keeps apart only one process's coroutines.

The git mirror: every task refreshes it before it runs and clones its conversation's
workspace from it. Two replicas' first tasks cloned into the same ``git-mirror.partial`` at
once, one of them answered "Could not prepare the workspace" (or an internal error), and the
mirror could be left broken for every task after
(tests/integration/slack/test_replicas_slack.py then waited
for an "Echo" answer that never came).

Each replica here is an object of its own on one directory, with its own in-process lock as
separate daemons have; what keeps them apart is a ``flock`` (``sandbox/shared_lock.py``),
which two opens in one process contend for as two processes do."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from gateway_bot.core.workspaces.directories import Workspaces
from gateway_bot.sandbox import shared_lock
from gateway_bot.sandbox.egress.rules import EgressRule
from gateway_bot.sandbox.podman.proxy import EgressProxy
from tests.conftest import GIT_IDENTITY, make_repo

pytestmark = pytest.mark.slow

REPLICAS = 3


async def refresh_all_at_once(replicas: list[Workspaces]) -> list[BaseException]:
    """Every replica's task refreshes the mirror at the same moment; the failures."""
    results = await asyncio.gather(*(w.refresh_mirror() for w in replicas), return_exceptions=True)
    return [r for r in results if isinstance(r, BaseException)]


async def test_replicas_refreshing_the_shared_mirror_at_once_all_get_the_repo(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", {"notes.txt": "first\n"})
    for attempt in range(2):  # the old race lost in every round (10 of 10 tried)
        state = tmp_path / f"state-{attempt}"
        replicas = [Workspaces(state, str(repo), None) for _ in range(REPLICAS)]

        assert await refresh_all_at_once(replicas) == [], "the first clone, by all at once"
        for replica in replicas:
            assert await replica.read_default_branch_file("notes.txt") == "first\n"

        assert await refresh_all_at_once(replicas) == [], "then fetches, by all at once"

    (repo / "notes.txt").write_text("second\n")
    commit = ["git", "-C", str(repo), *GIT_IDENTITY, "commit", "-qam", "more"]
    await asyncio.to_thread(subprocess.run, commit, check=True)
    assert await refresh_all_at_once(replicas) == [], "fetching a new commit, by all at once"
    for replica in replicas:
        assert await replica.read_default_branch_file("notes.txt") == "second\n"


async def test_a_mirror_left_without_head_is_cloned_again(tmp_path: Path) -> None:
    """What the race used to leave: ``git-mirror`` holding a few of a clone's files (no
    HEAD), on which every later clone's rename failed ("Directory not empty")."""
    repo = make_repo(tmp_path / "repo")
    state = tmp_path / "state"
    (state / "git-mirror").mkdir(parents=True)
    (state / "git-mirror" / "config").write_text("[core]\n")
    workspaces = Workspaces(state, str(repo), None)

    await workspaces.refresh_mirror()

    assert await workspaces.read_default_branch_file("README.md") == "# target repo\n"


async def test_replicas_routing_their_agents_through_the_shared_proxy_at_once_keep_every_route(
    tmp_path: Path,
) -> None:
    """Replicas on one machine share its egress proxy and the proxy's ``routes.json``; each
    edit reads the file, changes its own routes and replaces it. Two replicas' edits at once
    each wrote the file from what it read before the other's: the other's route was gone
    (its agent's requests refused), or both wrote the same ``routes.json.partial`` and one
    edit failed its task."""
    directory = tmp_path / "egress"
    directory.mkdir()  # (made when the proxy is first created)
    replicas = [EgressProxy(None, None, "d", "egress", directory) for _ in range(2)]  # type: ignore[arg-type]
    sources = {f"10.89.{r}.{n}": (replica, f"context-{r}-{n}") for r, replica in
               enumerate(replicas) for n in range(3, 23)}  # fmt: skip

    results = await asyncio.gather(
        *(replica.set_route(source, context, [EgressRule("git.example.org")])
          for source, (replica, context) in sources.items()),
        return_exceptions=True,
    )  # fmt: skip

    assert [r for r in results if isinstance(r, BaseException)] == []
    routes = json.loads((directory / "routes.json").read_text())["sources"]
    assert {source: routes.get(source, {}).get("context") for source in sources} == {
        source: context for source, (_, context) in sources.items()
    }, "every replica's route is in the file the proxy reads"


async def test_a_replica_that_stops_waiting_for_the_lock_leaves_it_free(tmp_path: Path) -> None:
    """A task cancelled (/stop, shutdown) while another replica held the lock must not take
    it later with nobody to let it go: the next refresh anywhere would wait for ever."""
    path = tmp_path / "git-mirror.lock"
    entered: list[str] = []

    async def take(who: str) -> None:
        async with shared_lock.held(path):
            entered.append(who)

    async with shared_lock.held(path):
        waiter = asyncio.create_task(take("cancelled"))
        await asyncio.sleep(0.2)
        assert entered == [], "it waits while another holds the lock"
        waiter.cancel()
    async with asyncio.timeout(60):
        await take("next")
    assert entered == ["next"]
