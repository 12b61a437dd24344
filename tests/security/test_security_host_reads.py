"""What the daemon reads from places the agent or the target repo writes, attacked for the
host's disk, memory and the people reading chat: each test is one attack, written before
its fix, and fails on the code before it.

- /diff copies the workspace's object files into a scratch repository when the kernel
  refuses a hard link. The agent can make it refuse (65,000 links to one inode: EMLINK on
  ext4) and can make the file a sparse terabyte that costs it no quota.
- /diff's reading runs in threads, which its 120 s limit cannot stop: the agent can make a
  file it would hash as large as it likes (a sparse file, a blob whose header says 1 TB).
- /diff's git reads an added or deleted file's blob whole, whatever its size: a 4 GB blob
  of zeros is 18 MB of objects.
- /diff's git diffs what the agent committed: 500 MB of line breaks is a few hundred KB of
  git objects, and xdiff needs some 40 bytes of memory for each line it compares.
- A new workspace is checked out on the host before any disk limit is measured: a repo's
  2 GB file of zeros is 9 MB of objects.
- The repo's ``.gateway/`` files are read from its default branch at every task: their size
  is the repo's to choose, and was read whole into the daemon and parsed on its loop.
- The workspace's checkout on the host: the repo's ``.gitattributes`` picks a filter, the
  host's global git config (``git lfs install``) says what program it runs.
- Outbox file names go to chat as the files' names: the agent picks them.
- The daemon's console log lines quote repo values (a repo's approvals rule it ignores, git's
  messages naming the repo's files and refs): a line break there wrote a log line of its own.
"""

from __future__ import annotations

import asyncio
import errno
import io
import logging
import os
import re
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from gateway_bot.config.action_rules import ActionApprovalSettings
from gateway_bot.config.repo import REPO_CONFIG_PATH, parse_repo_config
from gateway_bot.config.yaml_tags import ConfigError
from gateway_bot.core.actions.policy import merge_repo_policy
from gateway_bot.core.workspaces.directories import Workspaces
from gateway_bot.runtime.logs import configure_logging
from gateway_bot.sandbox.context_files import DiffBase, GitOrigin, WorkspaceSetupFailed
from gateway_bot.sandbox.host_files import HostContextFiles
from gateway_bot.sandbox.scratch_git import ScratchGitError
from gateway_bot.sandbox.workspace_snapshot import WorkspaceUnreadable
from tests.conftest import GIT_IDENTITY, make_repo

SPARSE_BYTES = 1024 * 1024 * 1024
"""A file that takes no disk and no quota in the workspace, and this much when copied."""


def _context_files(root: Path, workspace: Path) -> HostContextFiles:
    others = [root / name for name in ("home", "inbox", "outbox", "storage")]
    for directory in others:
        directory.mkdir(exist_ok=True)
    return HostContextFiles(workspace, *others)


def _link_until_refused(source: Path, into: Path) -> None:
    """Hard-link ``source`` into ``into`` until the file system refuses another link."""
    into.mkdir()
    with pytest.raises(OSError, match="Too many links") as refused:  # noqa: PT012
        for number in range(70_000):
            os.link(source, into / str(number))
    assert refused.value.errno == errno.EMLINK, "ext4 refuses a link past 65,000"


def test_a_sparse_object_file_that_cannot_be_linked_is_never_copied_in_full(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "conversation" / "workspace"
    subprocess.run(
        ["git", "clone", "-q", str(make_repo(tmp_path / "origin")), str(workspace)], check=True
    )
    (workspace / "README.md").write_text("changed by the agent\n")
    pack = workspace / ".git" / "objects" / "pack"
    pack.mkdir(exist_ok=True)
    planted = pack / f"pack-{'ab' * 20}.pack"
    with planted.open("wb") as handle:
        handle.truncate(SPARSE_BYTES)
    _link_until_refused(planted, workspace / ".git" / "many-links")
    scratch = tmp_path / "conversation" / ".diff-test"
    files = _context_files(tmp_path / "conversation", workspace)
    base = DiffBase("main", None, None, scratch)

    with pytest.raises(WorkspaceUnreadable) as refused:
        asyncio.run(files.workspace_changes(base))
    assert "cannot be linked" in str(refused.value)
    assert not scratch.exists(), "the scratch repository is removed"


def _commit_blob_claiming(workspace: Path, name: str, size: int) -> str:
    """Commit ``name`` as a loose object whose header says ``size`` bytes (git reads sizes
    from headers, never checking them against the content or the id); the commit's id."""
    object_id = "ab" * 20
    loose = workspace / ".git" / "objects" / object_id[:2] / object_id[2:]
    loose.parent.mkdir(exist_ok=True)
    loose.write_bytes(zlib.compress(b"blob %d\0" % size))
    git = ["git", "-C", str(workspace), *GIT_IDENTITY]
    tree = subprocess.run(
        [*git, "mktree"], input=f"100644 blob {object_id}\t{name}\n", text=True,
        capture_output=True, check=True,
    ).stdout.strip()  # fmt: skip
    commit = subprocess.run(
        [*git, "commit-tree", tree, "-p", "HEAD", "-m", "claims a terabyte"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    subprocess.run([*git, "update-ref", "refs/heads/main", commit], check=True)
    return commit


def test_a_diff_given_up_leaves_no_thread_reading_the_workspace(tmp_path: Path) -> None:
    origin = make_repo(tmp_path / "origin")
    workspace = tmp_path / "conversation" / "workspace"
    subprocess.run(["git", "clone", "-q", str(origin), str(workspace)], check=True)
    terabyte = 1024**4
    head = _commit_blob_claiming(workspace, "big.bin", terabyte)
    with (workspace / "big.bin").open("wb") as sparse:
        sparse.truncate(terabyte)  # the same size: /diff hashes it to see if it changed
    files = _context_files(workspace.parent, workspace)
    base = DiffBase("main", head, None, workspace.parent / ".diff-test")  # no commit to show

    async def given_up() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(files.workspace_changes(base), 4)
        # What asyncio.run does last: wait for the default executor's threads to end.
        await asyncio.wait_for(asyncio.get_running_loop().shutdown_default_executor(), 60)

    asyncio.run(given_up())
    assert not (workspace.parent / ".diff-test").exists(), "the scratch repository is removed"


def _zeros_loose_object(size: int) -> bytes:
    """A loose blob object of ``size`` zero bytes, made without compressing them: deflate
    blocks after a full flush do not depend on what came before, and the zlib checksum
    of zeros is arithmetic."""
    head = b"blob %d\0" % size
    raw = zlib.compressobj(1, zlib.DEFLATED, -15)
    parts = [raw.compress(head) + raw.flush(zlib.Z_FULL_FLUSH)]
    chunk = 16 * 1024 * 1024
    block = raw.compress(bytes(chunk)) + raw.flush(zlib.Z_FULL_FLUSH)
    parts += [block] * (size // chunk)
    parts.append(raw.compress(bytes(size % chunk)) + raw.flush())
    adler = zlib.adler32(head)
    low, high = adler & 0xFFFF, ((adler >> 16) + size * (adler & 0xFFFF)) % 65521
    return b"\x78\x01" + b"".join(parts) + ((high << 16) | low).to_bytes(4, "big")


def test_a_committed_blob_of_gigabytes_costs_git_a_bounded_memory(tmp_path: Path) -> None:
    origin = make_repo(tmp_path / "origin")
    upstream = subprocess.run(
        ["git", "-C", str(origin), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    workspace = tmp_path / "conversation" / "workspace"
    subprocess.run(["git", "clone", "-q", str(origin), str(workspace)], check=True)
    object_id = "cd" * 20  # git trusts a loose object's name: no 4 GB hash in a test
    loose = workspace / ".git" / "objects" / object_id[:2] / object_id[2:]
    loose.parent.mkdir(exist_ok=True)
    loose.write_bytes(_zeros_loose_object(4 * 1024**3))
    git = ["git", "-C", str(workspace), *GIT_IDENTITY]
    listing = f"100644 blob {object_id}\tdisk.img\n"
    tree = subprocess.run(
        [*git, "mktree"], input=listing, text=True, capture_output=True, check=True
    ).stdout.strip()
    commit = subprocess.run(
        [*git, "commit-tree", tree, "-p", "HEAD", "-m", "Add a disk image"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    subprocess.run([*git, "update-ref", "refs/heads/main", commit], check=True)
    files = _context_files(workspace.parent, workspace)
    base = DiffBase("main", upstream, None, workspace.parent / ".diff-test")

    with pytest.raises(ScratchGitError, match="Out of memory"):
        asyncio.run(files.workspace_changes(base))


def test_a_committed_file_of_millions_of_lines_is_not_diffed_line_by_line(
    tmp_path: Path,
) -> None:
    origin = make_repo(tmp_path / "origin")
    upstream = subprocess.run(
        ["git", "-C", str(origin), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    workspace = tmp_path / "conversation" / "workspace"
    subprocess.run(["git", "clone", "-q", str(origin), str(workspace)], check=True)
    (workspace / "lines.txt").write_bytes(b"\n" * 10_000_000)
    subprocess.run(["git", "-C", str(workspace), "add", "lines.txt"], check=True)
    commit = ["git", "-C", str(workspace), *GIT_IDENTITY, "commit", "-qm", "Ten million lines"]
    subprocess.run(commit, check=True)
    files = _context_files(workspace.parent, workspace)
    base = DiffBase("main", upstream, None, workspace.parent / ".diff-test")

    changes = asyncio.run(files.workspace_changes(base))

    assert "1 commit(s) not on origin's main:" in changes.summary
    assert "Binary files /dev/null and b/lines.txt differ" in changes.patch
    assert len(changes.patch) < 10_000


def test_a_repo_bigger_than_the_disk_limit_is_never_checked_out(tmp_path: Path) -> None:
    origin = make_repo(tmp_path / "origin")
    object_id = "ef" * 20
    loose = origin / ".git" / "objects" / object_id[:2] / object_id[2:]
    loose.parent.mkdir(exist_ok=True)
    loose.write_bytes(_zeros_loose_object(2 * 1024**3))
    git = ["git", "-C", str(origin), *GIT_IDENTITY]
    listing = f"100644 blob {object_id}\tdisk.img\n"
    tree = subprocess.run(
        [*git, "mktree"], input=listing, text=True, capture_output=True, check=True
    ).stdout.strip()
    commit = subprocess.run(
        [*git, "commit-tree", tree, "-p", "HEAD", "-m", "Add a disk image"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    subprocess.run([*git, "update-ref", "refs/heads/main", commit], check=True)
    workspaces = Workspaces(tmp_path / "state", str(origin), None)
    context = workspaces.execution_context("c1")

    async def prepare() -> None:
        await workspaces.refresh_mirror()
        files = HostContextFiles.of(context)
        await workspaces.prepare("c1", files, max_checkout_bytes=100 * 1024**2)

    with pytest.raises(WorkspaceSetupFailed) as refused:
        asyncio.run(prepare())
    assert str(refused.value) == (
        "the repo's files take 2,048 MB or more, past the conversation's disk limit of "
        "100 MB: not checked out"
    )
    assert not context.workspace.exists()


def test_a_huge_repo_config_on_the_default_branch_is_refused_unread(tmp_path: Path) -> None:
    padding = "# " + "x" * 78 + "\n"
    huge = "model: claude-test\n" + padding * (3 * 1024 * 1024 // len(padding))
    origin = make_repo(tmp_path / "origin", {REPO_CONFIG_PATH: huge})
    workspaces = Workspaces(tmp_path / "state", str(origin), None)

    async def read() -> str | None:
        await workspaces.refresh_mirror()
        return await workspaces.read_default_branch_file(REPO_CONFIG_PATH)

    with pytest.raises(ConfigError) as refused:
        asyncio.run(read())
    assert refused.value.source == REPO_CONFIG_PATH
    assert refused.value.problems == [
        f"has {len(huge):,} bytes, more than the 262,144 read (hint: keep it short): not read"
    ]
    # A file of a sane size still reads, and an absent one is None.
    (origin / REPO_CONFIG_PATH).write_text("model: claude-test\n")
    subprocess.run(["git", "-C", str(origin), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(origin), *GIT_IDENTITY, "commit", "-qm", "short"], check=True)
    assert asyncio.run(read()) == "model: claude-test\n"
    assert asyncio.run(workspaces.read_default_branch_file(".gateway/absent.yaml")) is None


def test_the_repos_gitattributes_run_no_filter_of_the_hosts_git_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = tmp_path / "smudge-ran"
    operators_config = tmp_path / "gitconfig"  # what `git lfs install` writes, in effect
    operators_config.write_text(
        f'[filter "lfs"]\n\tsmudge = touch {ran} && cat\n\trequired = true\n'
        f"[core]\n\thooksPath = {tmp_path / 'hooks'}\n"
    )
    (tmp_path / "hooks").mkdir()
    hook = tmp_path / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {ran}-hook\n")
    hook.chmod(0o755)
    origin = make_repo(
        tmp_path / "origin",
        {".gitattributes": "*.bin filter=lfs\n", "model.bin": "the repo's bytes\n"},
    )
    mirror = tmp_path / "mirror"
    subprocess.run(["git", "clone", "-q", "--mirror", str(origin), str(mirror)], check=True)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(operators_config))
    workspace = tmp_path / "conversation" / "workspace"
    workspace.parent.mkdir()
    files = _context_files(workspace.parent, workspace)

    asyncio.run(files.ensure_workspace(GitOrigin(mirror, str(origin), None)))

    assert (workspace / "model.bin").read_text() == "the repo's bytes\n"
    assert not ran.exists(), "the host's filter ran on the repo's file"
    assert not Path(f"{ran}-hook").exists(), "a hook ran on the host"
    remote = ["git", "-C", str(workspace), "remote", "get-url", "origin"]
    assert subprocess.run(remote, capture_output=True, text=True).stdout.strip() == str(origin)


def test_outbox_file_names_reach_chat_as_plain_printable_names(tmp_path: Path) -> None:
    workspace = tmp_path / "conversation" / "workspace"
    workspace.mkdir(parents=True)
    files = _context_files(workspace.parent, workspace)
    planted = {
        "invoice\u202etxt.exe": "reads as invoiceexe.txt",
        "report.txt\n\n[gateway-bot] Approved by the owner": "a line break",
        "report.txt\r\n[gateway-bot] Approved by the owner": "the same, another break",
        "zero\u200bwidth\x1b[31m.txt": "zero width space and an escape",
        b"not-utf8-\xff.txt".decode("utf-8", "surrogateescape"): "bytes no name decodes",
        "plain café.txt": "kept",
    }
    for name, text in planted.items():
        (files.outbox / name).write_text(text)

    taken = asyncio.run(files.take_outbox(tmp_path / "sent", frozenset()))

    names = sorted(path.name for path in taken)
    assert names == [
        "invoice_txt.exe",
        "not-utf8-_.txt",
        "plain café.txt",
        "report-2.txt__[gateway-bot] Approved by the owner",  # another file had its name
        "report.txt__[gateway-bot] Approved by the owner",
        "zero_width_[31m.txt",
    ]
    assert sorted(path.read_text() for path in taken) == sorted(planted.values())
    assert not list(files.outbox.iterdir()), "each file goes out once"


@pytest.fixture
def console_log() -> Iterator[io.StringIO]:
    """The daemon's console log format, written to a string; logging put back after."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    stream = io.StringIO()
    configure_logging("console", logging.INFO, stream)
    yield stream
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    structlog.reset_defaults()


def test_a_repo_value_never_writes_a_log_line_of_its_own(console_log: io.StringIO) -> None:
    forged = (
        "2026-11-26 12:00:00,000 INFO gateway_bot.core.admission.gate: owner allowed everything"
    )
    repo = parse_repo_config(
        "approvals:\n  rules:\n"
        f'    - {{tool: Bash, command: "rm *\\n{forged}\\u001b[2J", action: allow}}\n'
    )
    merge_repo_policy(ActionApprovalSettings(), repo.approvals)

    lines = console_log.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert re.match(r"^\d{4}-[\d -:,]+ WARNING gateway_bot\.core\.action_policy: ", lines[0])
    assert "\x1b" not in lines[0]
    assert "rm *\\n2026-11-26 12:00:00,000 INFO" in lines[0], "shown, escaped"


def test_a_workspace_whose_git_the_agent_removed_is_not_cloned_again_at_each_task(
    tmp_path: Path,
) -> None:
    origin = make_repo(tmp_path / "origin")
    mirror = tmp_path / "mirror"
    subprocess.run(["git", "clone", "-q", "--mirror", str(origin), str(mirror)], check=True)
    workspace = tmp_path / "conversation" / "workspace"
    workspace.parent.mkdir()
    files = _context_files(workspace.parent, workspace)
    origin_of = GitOrigin(mirror, str(origin), None)
    asyncio.run(files.ensure_workspace(origin_of))
    subprocess.run(["rm", "-rf", str(workspace / ".git")], check=True)  # the agent's doing

    with pytest.raises(WorkspaceSetupFailed, match=r"the workspace has no \.git any more"):
        asyncio.run(files.ensure_workspace(origin_of))
    assert not (workspace.parent / "workspace.partial").exists(), "no checkout was made"
    assert (workspace / "README.md").exists(), "the agent's files stay"
