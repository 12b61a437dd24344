"""Every task fetches the repo's mirror before it runs; tasks that ask while a fetch runs
share the next one (``Workspaces.refresh_mirror``). Each still sees what origin held when
it asked: a commit pushed while another task's fetch runs reaches the tasks that ask after
it."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

from gateway_bot.core.workspaces.directories import Workspaces
from tests.conftest import GIT_IDENTITY, make_repo


def _commit(repo: Path, name: str) -> None:
    (repo / name).write_text(f"{name}\n")
    subprocess.run(["git", "-C", str(repo), "add", name], check=True)
    subprocess.run(["git", "-C", str(repo), *GIT_IDENTITY, "commit", "-q", "-m", name], check=True)


def test_tasks_asking_during_a_fetch_see_commits_made_before_they_asked(tmp_path: Path) -> None:
    origin = make_repo(tmp_path / "origin")
    workspaces = Workspaces(tmp_path / "state", str(origin), None)

    async def steps() -> list[str | None]:
        await workspaces.refresh_mirror()  # the clone
        seen: list[str | None] = []
        for round_ in range(5):  # the commit lands at a different point of a fetch each time
            running = asyncio.create_task(workspaces.refresh_mirror())
            await asyncio.sleep(0.005 * round_)
            name = f"pushed-{round_}.txt"
            await asyncio.to_thread(_commit, origin, name)
            # Asked after the commit, while the first fetch may still run: all three are
            # served by a fetch begun after they asked.
            await asyncio.gather(*(workspaces.refresh_mirror() for _ in range(3)))
            await running
            seen.append(await workspaces.read_default_branch_file(name))
        return seen

    seen = asyncio.run(steps())
    assert seen == [f"pushed-{n}.txt\n" for n in range(5)]
