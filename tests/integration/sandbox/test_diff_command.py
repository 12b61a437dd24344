"""Where the agent's work lands, as a user finds out: the console's banner and /status name
the workspace, /diff (console and Slack) shows what the agent committed but did not push and
what it left uncommitted, a long diff as a file. The workspace is the agent's to write, so
/diff is also attacked: a planted git config must run nothing, and planted links or a .git
file must show nothing from outside the workspace."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import time
from pathlib import Path

from tests.conftest import GIT_IDENTITY, make_repo, write_config
from tests.integration.slack.test_slack_daemon import (
    ALICE,
    GENERAL,
    MENTION,
    people,
    slack_config,
    start_socket_daemon,
)
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import FakeSlack, file_content
from tests.support.sandbox_fixtures import SandboxSetup

AGENT_GIT = "git -c user.name=Agent -c user.email=agent@example.test"


def _start(gateway, config_path: Path) -> tuple[object, str, Path]:
    """A console chat; returns it, the conversation id and the workspace path the banner
    names."""
    chat = gateway("chat", "--config", str(config_path))
    banner = chat.expect(r"^gateway-bot console · conversation default \(([0-9a-f]{8})\)")
    conversation = re.search(r"\(([0-9a-f]{8})\)", banner).group(1)  # type: ignore[union-attr]
    where = chat.expect(r"^Workspace \(a clone of the repo\): ")
    path = re.search(r": (/\S+/workspace)", where).group(1)  # type: ignore[union-attr]
    assert "(cloned at the first message)" in where
    assert where.endswith("· /diff shows the changes")
    return chat, conversation, Path(path)


def test_banner_status_and_diff_show_where_the_work_is(
    gateway, config_path: Path, fake_api: FakeAnthropic, target_repo: Path
) -> None:
    chat, conversation, workspace = _start(gateway, config_path)
    assert conversation in str(workspace), "the workspace belongs to the conversation shown"
    chat.send(
        f"RUN_BASH printf 'hello\\n' > notes.txt && git add notes.txt && {AGENT_GIT} commit "
        "-qm 'Add notes' && printf 'changed\\n' >> README.md && printf 'draft\\n' > draft.txt"
    )
    chat.expect(r"^agent> Echo: ")
    chat.send("/status")
    chat.expect(rf"^agent> Conversation {conversation} ")
    chat.expect(rf"^Workspace \(a clone of the repo\): {re.escape(str(workspace))}$")
    chat.send("/diff")
    chat.expect(rf"^agent> Workspace \(a clone of the repo\): {re.escape(str(workspace))}$")
    chat.expect(r"^HEAD is on main\.$")
    chat.expect(r"^1 commit\(s\) not on origin's main:$")
    chat.expect(r"^  [0-9a-f]{7,} Add notes$")
    chat.expect(r"^Uncommitted changes:$")
    chat.expect(r"^  M README\.md$")
    chat.expect(r"^  A draft\.txt$")
    chat.expect(r"^```diff$")
    chat.expect(r"^\+hello$")  # the commit's patch
    chat.expect(r"^ # target repo$")
    chat.expect(r"^\+changed$")
    chat.expect(r"^\+draft$")
    chat.finish()
    # Your checkout is untouched: the work is in the clone.
    assert (target_repo / "README.md").read_text() == "# target repo\n"
    assert not (target_repo / "notes.txt").exists()


def test_a_long_diff_comes_as_a_file_and_a_pushed_commit_is_not_shown(
    gateway, tmp_path: Path, fake_api: FakeAnthropic
) -> None:
    origin = make_repo(tmp_path / "origin")
    accept_pushes = ["config", "receive.denyCurrentBranch", "ignore"]
    subprocess.run(["git", "-C", str(origin), *accept_pushes], check=True)
    config = write_config(tmp_path, origin, fake_api)
    chat, _, workspace = _start(gateway, config)
    chat.send(
        f"RUN_BASH printf 'x\\n' > pushed.txt && git add pushed.txt && {AGENT_GIT} commit -qm "
        "Pushed && git push -q origin HEAD:main && seq 1 3000 > numbers.txt"
    )
    chat.expect(r"^agent> Echo: ")
    chat.send("/diff")
    chat.expect(r"^Uncommitted changes:$")
    chat.expect(r"^  A numbers\.txt$")
    chat.expect(r"^The whole diff \([\d,]+ lines\) is attached as diff\.patch\.$")
    attached = Path(chat.expect(r"^  \[file\] .*diff\.patch$").split("[file] ", 1)[1])
    chat.finish()
    assert "commit(s) not on origin" not in "\n".join(chat.lines), "pushed work is on origin"
    patch = attached.read_text()
    assert "+2999\n" in patch
    assert "+3000\n" in patch
    assert workspace not in attached.parents, "sent files live outside the agent's reach"


def test_a_planted_git_config_runs_nothing(
    gateway, config_path: Path, fake_api: FakeAnthropic, tmp_path: Path
) -> None:
    chat, _, workspace = _start(gateway, config_path)
    chat.send("RUN_BASH printf 'changed\\n' >> README.md")
    chat.expect(r"^agent> Echo: ")
    markers = tmp_path / "markers"
    markers.mkdir()
    names = ("fsmonitor", "filter", "textconv", "external", "pager", "gpg", "included", "askpass")
    ran = {name: markers / name for name in names}
    (workspace / ".git" / "included.cfg").write_text(
        f"[core]\n\tfsmonitor = touch {ran['included']}\n"
    )
    with (workspace / ".git" / "config").open("a") as config:
        config.write(
            f"[core]\n\tfsmonitor = touch {ran['fsmonitor']}\n"
            f"\tpager = touch {ran['pager']}; cat\n\taskPass = touch {ran['askpass']}\n"
            f'[filter "evil"]\n\tclean = touch {ran["filter"]}; cat\n\trequired = true\n'
            f'[diff "evil"]\n\ttextconv = touch {ran["textconv"]}; cat\n'
            f"[diff]\n\texternal = touch {ran['external']}\n"
            f"[log]\n\tshowSignature = true\n[gpg]\n\tprogram = touch {ran['gpg']}\n"
            "[include]\n\tpath = included.cfg\n"
        )
    (workspace / ".git" / "info").mkdir(exist_ok=True)
    (workspace / ".git" / "info" / "attributes").write_text("* filter=evil diff=evil\n")
    (workspace / ".gitattributes").write_text("* filter=evil diff=evil\n")
    chat.send("/diff")
    chat.expect(r"^  M README\.md$")
    chat.expect(r"^\+changed$")
    chat.finish()
    assert [name for name, marker in ran.items() if marker.exists()] == []


def test_links_and_a_git_file_show_nothing_from_outside_the_workspace(
    gateway, config_path: Path, fake_api: FakeAnthropic, tmp_path: Path
) -> None:
    secret = make_repo(tmp_path / "secret", {"secret.txt": "the password is swordfish\n"})
    commit = ["commit", "-q", "--allow-empty", "-m", "TOP SECRET plans"]
    subprocess.run(["git", "-C", str(secret), *GIT_IDENTITY, *commit], check=True)
    chat, _, workspace = _start(gateway, config_path)
    chat.send("RUN_BASH printf 'mine\\n' > mine.txt")
    chat.expect(r"^agent> Echo: ")
    git_dir = workspace / ".git"
    # Object store, refs and common dir pointed at another repository on the host.
    (git_dir / "objects" / "info").mkdir(exist_ok=True)
    (git_dir / "objects" / "info" / "alternates").write_text(f"{secret}/.git/objects\n")
    (git_dir / "commondir").write_text(f"{secret}/.git\n")
    (git_dir / "refs" / "heads" / "main").unlink()
    (git_dir / "refs" / "heads" / "main").symlink_to(secret / ".git" / "refs" / "heads" / "main")
    (workspace / "leak.txt").symlink_to(secret / "secret.txt")
    chat.send("/diff")
    chat.expect(r"^agent> Workspace ")
    chat.expect(r"  A leak\.txt$|cannot be read|not a branch")
    # Then the whole .git swapped for a .git file naming the other repository.
    git_dir.rename(workspace / ".git-moved")
    (workspace / ".git").write_text(f"gitdir: {secret}/.git\n")
    chat.send("/diff")
    chat.expect(r"has no git repository \(\.git is missing, or not a directory\)\.$")
    chat.finish()
    shown = "\n".join(chat.lines)
    assert "swordfish" not in shown
    assert "TOP SECRET" not in shown
    for sent in (workspace.parent / "sent").rglob("*"):
        if sent.is_file():
            assert "swordfish" not in sent.read_text(errors="replace")
    assert not list(workspace.parent.glob(".diff-*")), "the scratch repository is removed"


def test_a_diff_stuck_on_the_agents_fifo_holds_up_no_other_message(
    gateway, config_path: Path, fake_api: FakeAnthropic
) -> None:
    """git opens each .gitignore it meets without O_NONBLOCK: a FIFO there stops /diff until
    its 120 s are up. The channel's next messages must not wait for it."""
    chat, _, workspace = _start(gateway, config_path)
    chat.send("RUN_BASH mkfifo .gitignore && printf 'changed\\n' >> README.md")
    chat.expect(r"^agent> Echo: ")
    chat.send("/diff")
    chat.send("hello while /diff waits")
    chat.expect(r"^agent> Echo: hello while /diff waits$")
    _write_end_once_read(workspace / ".gitignore")
    chat.expect(r"^  M README\.md$")
    chat.finish()


def _write_end_once_read(fifo: Path) -> None:
    """Open and close ``fifo``'s write end once a reader (git) waits on it: git reads an
    empty file and goes on. Until then opening it non-blocking fails with ENXIO."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            time.sleep(0.1)
        else:
            return
    raise AssertionError("git never opened the FIFO")


def test_in_the_sandbox_the_workspace_is_named_as_the_agent_sees_it_too(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(sandbox.config()))
    where = chat.expect(r"^Workspace \(a clone of the repo\): /\S+/workspace, ")
    assert ", /workspace inside the agent's container (cloned at the first message)" in where
    chat.send("RUN_BASH printf 'in the box\\n' > boxed.txt")
    chat.expect(r"^agent> Echo: ")
    chat.send("/status")
    inside = ", /workspace inside the agent's container$"
    chat.expect(r"^Workspace \(a clone of the repo\): /\S+/workspace" + inside)
    chat.send("/diff")
    chat.expect(r"^  A boxed\.txt$")
    chat.expect(r"^\+in the box$")
    chat.finish()


def test_on_slack_a_long_diff_is_a_file_in_the_thread(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    people(fake_slack)
    config = slack_config(tmp_path, target_repo, fake_api, fake_slack)
    start_socket_daemon(gateway, fake_slack, config)
    ts = fake_slack.user_says(ALICE, GENERAL, f"{MENTION} RUN_BASH seq 1 3000 > numbers.txt")
    fake_slack.wait_for_reply(GENERAL, ts, "Echo:")
    fake_slack.user_says(ALICE, GENERAL, "!diff", thread_ts=ts)
    reply = fake_slack.wait_for_reply(GENERAL, ts, "attached as diff.patch")
    assert "A numbers.txt" in reply["text"]
    shared = fake_slack.wait_until(
        lambda: [f for m in fake_slack.bot_posts(GENERAL, ts) for f in m.get("files") or []],
        what="diff.patch in the thread",
    )
    assert [f["name"] for f in shared] == ["diff.patch"]
    assert b"+2999\n" in file_content(fake_slack, shared[0]["id"])
