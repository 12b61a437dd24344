"""The workspace of a context whose directories are volumes on another host (decision 0130):
cloned and compared by git in the context's own container.

The clone: the daemon's mirror is packed here as a ``git bundle`` (git on the daemon's own
repository, its own config only), goes into the container by an archive PUT, and
``git clone`` runs there into the empty workspace volume; ``origin`` is then set to the
repo's URL. /diff: git runs there with the system and global configuration off and the
repository's hooks and fsmonitor off; the rest of the repository's config (a filter, a
textconv) can only run programs in the agent's own container, as the agent could anyway.
What comes back is the agent's data: bounded, split on a marker made for the call, shown as
text and never acted on. The container's ``git`` and ``sh`` must exist (the default image has
both; a repo's Containerfile on such a host must keep git).
"""

from __future__ import annotations

import asyncio
import secrets
import tempfile
from pathlib import Path
from typing import IO

from gateway_bot.sandbox.context_files import (
    DiffBase,
    GitOrigin,
    WorkspaceChanges,
    WorkspaceSetupFailed,
)
from gateway_bot.sandbox.host_commands import run_git
from gateway_bot.sandbox.podman import container_archive as archive
from gateway_bot.sandbox.podman import containers as spec
from gateway_bot.sandbox.podman.container_exec import exec_bounded
from gateway_bot.sandbox.podman.service import PodmanService
from gateway_bot.sandbox.scratch_git import ScratchGitError
from gateway_bot.sandbox.workspace_snapshot import WorkspaceUnreadable

MAX_DIFF_BYTES = 16 * 1024 * 1024
"""What /diff reads of git's output in the container at most (summary and patch)."""
_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
    "HOME": "/nonexistent",
}
_SAFE = "-c core.hooksPath=/dev/null -c core.fsmonitor=false -c diff.external= -c core.pager=cat"
_NO_WORKSPACE = 3
_NOT_EMPTY = 4

_CLONE = f"""
bundle="$1"; url="$2"; branch="$3"
trap 'rm -f "$bundle"' EXIT
cd {spec.PATHS.workspace} || exit {_NO_WORKSPACE}
[ -e .git ] && exit 0
[ -z "$(ls -A)" ] || exit {_NOT_EMPTY}
if [ -n "$branch" ]; then
  git {_SAFE} clone --quiet --template= --branch "$branch" "$bundle" . || exit 1
else
  git {_SAFE} clone --quiet --template= "$bundle" . || exit 1
fi
git {_SAFE} remote set-url origin "$url"
"""

_CHANGES = f"""
mark="$1"; branch="$2"; upstream="$3"
cd {spec.PATHS.workspace} 2>/dev/null && [ -d .git ] || exit {_NO_WORKSPACE}
g() {{ git {_SAFE} -c color.ui=false "$@"; }}
head=$(g rev-parse --verify --quiet HEAD)
set --
g rev-parse --verify --quiet "refs/remotes/origin/$branch" >/dev/null && \
  set -- "$@" "^refs/remotes/origin/$branch"
[ -n "$upstream" ] && g cat-file -e "$upstream^{{commit}}" 2>/dev/null && set -- "$@" "^$upstream"
g symbolic-ref --quiet --short HEAD; echo "$mark"
echo "$head"; echo "$mark"
if [ -n "$head" ]; then
  g rev-list --count HEAD "$@" --; echo "$mark"
  g log --max-count=20 --format='  %h %s' HEAD "$@" --; echo "$mark"
  g log --reverse --format=fuller --stat --patch --no-color --no-ext-diff --no-textconv \
    HEAD "$@" --; echo "$mark"
  base=HEAD
else
  echo 0; echo "$mark"; echo "$mark"; echo "$mark"
  base=$(g hash-object -t tree --stdin </dev/null)
fi
index=$(mktemp) || exit 1
trap 'rm -f "$index"' EXIT
[ -f .git/index ] && cat .git/index >"$index"
GIT_INDEX_FILE="$index" g add --all . >/dev/null 2>&1
GIT_INDEX_FILE="$index" g diff --cached --name-status --no-renames "$base" --; echo "$mark"
GIT_INDEX_FILE="$index" g diff --cached --stat --patch --no-color --no-ext-diff --no-textconv \
  "$base" --
"""


async def clone(service: PodmanService, container: str, origin: GitOrigin) -> None:
    """Clone ``origin`` into the (running) container's empty workspace. Raises
    WorkspaceSetupFailed with git's words."""
    name = f"gwb-workspace-{secrets.token_hex(6)}.bundle"
    with tempfile.TemporaryDirectory(prefix="gwb-bundle-") as staging:
        bundle = Path(staging) / "workspace.bundle"
        await run_git(
            "-C", str(origin.mirror), "bundle", "create", "--quiet", str(bundle), "--all",
            own_config_only=True,
        )  # fmt: skip
        tar = await asyncio.to_thread(_tar_of, bundle, name)
        try:
            await archive.write(service, container, "/tmp", tar)
        except OSError as exc:
            raise WorkspaceSetupFailed(
                f"the repository could not be sent to the host: {exc}"
            ) from exc
        finally:
            tar.close()
    argv = ["sh", "-c", _CLONE, "sh", f"/tmp/{name}", origin.url, origin.branch or ""]
    done = await exec_bounded(service, container, argv, limit=64 * 1024, env=_GIT_ENV)
    if done.code == _NOT_EMPTY:
        raise WorkspaceSetupFailed(
            "the workspace has no .git any more (the agent removed it): /new starts a "
            "conversation with a fresh clone"
        )
    if done.code != 0:
        words = (done.error or done.out.decode("utf-8", "replace")).strip()[-500:]
        raise WorkspaceSetupFailed(f"git clone in the container failed: {words or done.code}")


def _tar_of(bundle: Path, name: str) -> IO[bytes]:
    with bundle.open("rb") as handle:
        return archive.tar_of([(name, handle, bundle.stat().st_size, 0o644)])


async def changes(service: PodmanService, container: str, base: DiffBase) -> WorkspaceChanges:
    """The workspace's commits not on origin's branch and its uncommitted changes (untracked
    files .gitignore does not hide included), as git in the container tells them."""
    mark = f"--gwb-{secrets.token_hex(12)}--"
    argv = ["sh", "-c", _CHANGES, "sh", mark, base.branch, base.upstream or ""]
    done = await exec_bounded(service, container, argv, limit=MAX_DIFF_BYTES, env=_GIT_ENV)
    if done.code == _NO_WORKSPACE:
        raise WorkspaceUnreadable("There is no workspace (no clone) yet.")
    text = done.out.decode("utf-8", "replace")
    parts = text.split(f"{mark}\n")
    if len(parts) < 7:
        if done.cut and len(parts) >= 6:
            parts.append("")
        else:
            raise ScratchGitError(f"git in the container could not compare: {done.error[-300:]}")
    branch, head, count_text, listing, log, status, patch = parts[:7]
    if done.cut:
        patch += f"\n… cut: more than {MAX_DIFF_BYTES:,} bytes\n"
    return WorkspaceChanges(
        *_shaped(base.branch, branch, head, count_text, listing, log, status, patch)
    )


def _shaped(
    origin_branch: str,
    branch: str,
    head: str,
    count_text: str,
    listing: str,
    log: str,
    status: str,
    patch: str,
) -> tuple[str, str]:
    """(summary, patch) in the words ``workspace_changes`` uses for a local workspace."""
    branch, head = branch.strip(), head.strip()
    count = int(count_text.strip()) if count_text.strip().isdigit() else 0
    parts = [f"HEAD is on {branch}." if branch else "HEAD is detached."]
    if not head:
        parts[0] = f"HEAD is on {branch}, which has no commit."
    if count:
        more = f"\n  … and {count - 20} more" if count > 20 else ""
        parts.append(
            f"{count} commit(s) not on origin's {origin_branch}:\n{listing.rstrip()}{more}"
        )
    lines = [f"  {line.replace(chr(9), ' ', 1)}" for line in status.rstrip().splitlines()]
    if lines:
        parts.append("Uncommitted changes:\n" + "\n".join(lines))
    if not count and not lines:
        parts.append(f"No changes: nothing uncommitted, nothing origin's {origin_branch} lacks.")
    shown = f"# Commits not on origin's {origin_branch}\n\n{log}\n" if count and log else ""
    if lines:
        shown += f"# Uncommitted changes (working tree against HEAD)\n\n{patch}"
    return "\n".join(parts), shown
