"""Attacks from inside the sandbox on the host, through the files and settings the agent or
the target repo control: links planted in the inbox, an outbox entry flipped between a file
and a link, a repo's container_env aimed at the host's podman. Each runs the real daemon
with real podman; each failed before its fix (decision 0012, items 1, 3 and 4)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import write_config
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import APP_TOKEN, BOT_TOKEN, BOT_USER, TEAM, FakeSlack
from tests.support.sandbox_fixtures import SandboxSetup, commit_file, wait_until

ALICE, GENERAL = "U0ALICE", "C0GENERAL"
MENTION = f"<@{BOT_USER}>"


def _slack_in_sandbox(sandbox: SandboxSetup, fake: FakeSlack) -> Path:
    fake.add_user(ALICE, "Alice")
    fake.add_channel(GENERAL, "general")
    slack = {
        "bot_token": BOT_TOKEN,
        "app_token": APP_TOKEN,
        "team_ids": [TEAM],
        "allowed_users": [ALICE],
        "api_base_url": fake.base_url,
    }
    data: dict[str, Any] = yaml.safe_load(sandbox.config().read_text())
    return write_config(
        sandbox.tmp_path,
        sandbox.repo,
        sandbox.api,
        sandbox=data["sandbox"],
        agent=data["agent"],
        channels={"console": None, "slack": slack},
    )


def test_an_upload_never_follows_a_link_the_agent_planted_in_the_inbox(
    gateway: Any, sandbox: SandboxSetup, fake_slack: FakeSlack, tmp_path: Path
) -> None:
    victim = tmp_path / "host-only" / "cron-x"
    victim.parent.mkdir()
    daemon = gateway("run", "--config", str(_slack_in_sandbox(sandbox, fake_slack)))
    fake_slack.wait_connected(1)
    # The agent learns host paths from /proc/self/mountinfo; here the test simply tells it.
    plant = (
        f"ln -s {victim} /inbox/report.txt && ln -s {victim} /inbox/report-2.txt.partial"
        f" && ln -s {victim} /inbox/report-2.txt.part && ls -l /inbox"
    )
    ts = fake_slack.user_says(ALICE, GENERAL, f"{MENTION} RUN_BASH {plant}")
    fake_slack.wait_for_reply(GENERAL, ts, "Echo:")
    context_id, _ = sandbox.only_container()
    inbox = sandbox.conversation_dir(context_id) / "inbox"
    assert (inbox / "report.txt").is_symlink(), "the agent planted its link"

    fake_slack.user_says(
        ALICE,
        GENERAL,
        f"{MENTION} here is the report",
        thread_ts=ts,
        files=[("report.txt", b"* * * * * root touch /pwned\n")],
    )
    fake_slack.wait_for_reply(GENERAL, ts, "Echo: here is the report")

    assert not victim.exists(), "the daemon wrote through the agent's link onto the host"
    saved = [p for p in inbox.iterdir() if not p.is_symlink()]
    assert [p.name for p in saved] == ["report-2.txt"]
    assert saved[0].read_bytes() == b"* * * * * root touch /pwned\n"
    prompt = " ".join(fake_slack_prompts(sandbox.api))
    assert "/inbox/report-2.txt" in prompt, "the agent is told the name the file got"
    daemon.terminate()


def fake_slack_prompts(api: FakeAnthropic) -> list[str]:
    return [text for request in api.requests for text in api.user_texts(request)]


def test_an_outbox_entry_flipped_to_a_link_never_uploads_a_host_file(
    gateway: Any, sandbox: SandboxSetup, tmp_path: Path
) -> None:
    secret = tmp_path / "daemon-secrets.yaml"
    secret.write_text("api_key: TOPSECRET-host-credential\n")
    # A loop that keeps swapping /outbox/f between a regular file and a link to the secret,
    # left running while the task ends and the daemon collects the outbox.
    flipper = (
        "nohup sh -c 'while :; do echo decoy > /outbox/f.tmp; mv -f /outbox/f.tmp /outbox/f; "
        f"ln -sfn {secret} /outbox/f.lnk; mv -Tf /outbox/f.lnk /outbox/f; done'"
        " >/dev/null 2>&1 & sleep 1"
    )
    chat = gateway("chat", "--config", str(sandbox.config()))
    # Each task ends with the outbox caught as a file or as a link, about even odds (the
    # loop's own state when it is stopped or read): at least three tasks, and more until one
    # decoy went out, so the test sees both what is refused and what is sent.
    for attempt in range(12):
        chat.send(f"RUN_BASH {flipper}")
        chat.expect(r"^agent> Echo:")
        chat.expect(r"^  \[\$")  # the usage line ends the reply (files come before it)
        if attempt >= 2 and any("[file] " in line for line in chat.lines):
            break
    chat.close_input()
    assert chat.wait() == 0
    context_id, _ = sandbox.only_container()
    sent = sandbox.conversation_dir(context_id) / "sent"
    copies = [p for p in sent.rglob("*") if p.is_file() or p.is_symlink()]
    assert copies, "some regular files were sent (the decoys)"
    for copy in copies:
        assert not copy.is_symlink(), f"{copy} is a link"
        # A decoy caught between the shell's truncation and its write is sent empty or cut.
        assert "decoy\n".startswith(copy.read_text()), f"{copy} carries a host file"
    shown = "\n".join(chat.lines)
    assert "TOPSECRET" not in shown
    for path in re.findall(r"\[file\] (\S+)", shown):
        assert "decoy\n".startswith(Path(path).read_text())


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_background_processes_end_with_the_task_even_with_the_containers_tools_replaced(
    gateway: Any, sandbox: SandboxSetup
) -> None:
    # The agent is root in its container: it swaps sh and kill for programs that do
    # nothing, then leaves a process behind (a disk filler, a loop racing the outbox).
    sabotage = (
        "printf '#!/bin/bash\\nexit 0\\n' > /tmp/noop && chmod +x /tmp/noop"
        " && cp /tmp/noop /usr/bin/dash && cp /tmp/noop /usr/bin/kill"
        " && (setsid sleep 777777 >/dev/null 2>&1 < /dev/null &)"
    )
    chat = gateway("chat", "--config", str(sandbox.config()))
    chat.send(f"RUN_BASH {sabotage}")
    chat.expect(r"^agent> Echo:")
    wait_until(lambda: not _processes_with("sleep 777777"), "the stray to be ended", 30)
    chat.send("and the next task still runs")
    chat.expect(r"^agent> Echo: .*next task still runs")
    chat.close_input()
    assert chat.wait() == 0


EVIL_RUNTIME = """#!/bin/sh
touch {marker}
exec {runc} "$@"
"""


def test_a_repo_container_env_reaches_only_the_container_never_the_hosts_podman(
    gateway: Any, sandbox: SandboxSetup, tmp_path: Path
) -> None:
    marker = tmp_path / "ran-on-the-host-as-root"
    chat = gateway("chat", "--config", str(sandbox.config()))
    chat.send("hello")
    chat.expect(r"^agent> Echo: hello")
    context_id, _ = sandbox.only_container()
    host_workspace = sandbox.conversation_dir(context_id) / "workspace"
    # The agent writes a containers.conf that swaps runc for its own script...
    evil = host_workspace / ".bin"
    evil.mkdir()
    (evil / "runc").write_text(EVIL_RUNTIME.format(marker=marker, runc="/usr/bin/runc"))
    (evil / "runc").chmod(0o755)
    (evil / "containers.conf").write_text(
        f'[engine]\nruntime = "runc"\n[engine.runtimes]\nrunc = ["{evil}/runc"]\n'
    )
    # ...and a commit on the default branch points the host's podman at it.
    commit_file(
        sandbox.repo,
        ".gateway/config.yaml",
        f"container_env:\n  CONTAINERS_CONF: {evil}/containers.conf\n"
        f"  TMPDIR: {evil}\n  GREETING: hello-from-the-repo\n",
    )
    chat.send("RUN_BASH echo $GREETING $CONTAINERS_CONF > /outbox/env.txt")
    chat.expect(r"^agent> Echo:")
    chat.expect(r"\[file\] .*env\.txt")
    chat.close_input()
    assert chat.wait() == 0
    assert not marker.exists(), "the repo's variables configured the host's podman"
    sent = next((sandbox.conversation_dir(context_id) / "sent").rglob("env.txt"))
    assert sent.read_text() == f"hello-from-the-repo {evil}/containers.conf\n", (
        "the variables reached the agent inside the container"
    )


def test_a_repo_may_not_set_path_the_loader_or_the_agents_credentials(
    gateway: Any, sandbox: SandboxSetup
) -> None:
    commit_file(
        sandbox.repo,
        ".gateway/config.yaml",
        "container_env:\n  PATH: /workspace/.bin:/usr/bin:/bin\n  LD_PRELOAD: /workspace/x.so\n"
        '  ANTHROPIC_API_KEY: mine\n  lower: "x"\n',
    )
    chat = gateway("chat", "--config", str(sandbox.config()))
    chat.send("hello")
    chat.expect(r"^error> The repo config \.gateway/config\.yaml has problems")
    chat.expect(r"PATH may not be set by the repo")
    chat.close_input()
    assert chat.wait() == 0
    text = "\n".join(chat.lines)
    assert "LD_PRELOAD may not be set" in text
    assert "ANTHROPIC_API_KEY may not be set" in text
    assert "'lower' is not a variable name" in text
    assert not sandbox.api.requests, "the agent never ran"
