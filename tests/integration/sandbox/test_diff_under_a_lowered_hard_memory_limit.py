"""/diff on a host whose daemon runs under a hard address-space limit below git's cap
(systemd's ``LimitAS=``, ``ulimit -v``): git's cap must not try to raise the hard limit
(EPERM without CAP_SYS_RESOURCE, and every /diff failed). The daemon here is a child with
that hard limit and without CAP_SYS_RESOURCE, running the real /diff code."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import GIT_IDENTITY, make_repo

HARD_LIMIT = 2 * 1024**3
"""Below git's 3 GB cap, well above what git and the child's Python need."""

_CHILD = """
import asyncio, sys
from pathlib import Path
from gateway_bot.sandbox.context_files import DiffBase
from gateway_bot.sandbox.host_files import HostContextFiles

root, upstream = Path(sys.argv[1]), sys.argv[2]
files = HostContextFiles(*(root / n for n in ("workspace", "home", "inbox", "outbox", "storage")))
base = DiffBase("main", upstream, None, root / ".diff-test")
changes = asyncio.run(files.workspace_changes(base))
print(changes.summary)
print(changes.patch)
"""


def _lowered_hard_limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (HARD_LIMIT, HARD_LIMIT))


def test_diff_works_when_the_daemons_hard_memory_limit_is_below_gits_cap(
    tmp_path: Path,
) -> None:
    origin = make_repo(tmp_path / "origin")
    upstream = subprocess.run(
        ["git", "-C", str(origin), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    root = tmp_path / "conversation"
    workspace = root / "workspace"
    subprocess.run(["git", "clone", "-q", str(origin), str(workspace)], check=True)
    for name in ("home", "inbox", "outbox", "storage"):
        (root / name).mkdir()
    (workspace / "README.md").write_text("# target repo\nchanged by the agent\n")
    commit = ["git", "-C", str(workspace), *GIT_IDENTITY, "commit", "-qam", "Edit the README"]
    subprocess.run(commit, check=True)
    # As root, the child also loses CAP_SYS_RESOURCE (as a daemon under systemd's
    # LimitAS= and a capability bounding set, or a non-root daemon, has it not).
    setpriv = shutil.which("setpriv")
    assert setpriv is not None, "util-linux's setpriv"
    drop = [setpriv, "--bounding-set=-sys_resource", "--"] if os.geteuid() == 0 else []

    child = subprocess.run(
        [*drop, sys.executable, "-c", _CHILD, str(root), upstream],
        capture_output=True, text=True, timeout=60, preexec_fn=_lowered_hard_limit,
    )  # fmt: skip

    assert child.returncode == 0, child.stderr[-2000:]
    assert "1 commit(s) not on origin's main:" in child.stdout
    assert "+changed by the agent" in child.stdout
