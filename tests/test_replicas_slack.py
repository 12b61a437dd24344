"""Two daemons (replicas) on one state database with the same config, talking Slack through
the fake: the listener runs on one of them only, every message is answered exactly once and
in order per conversation whichever replica runs it, and a replica killed mid-task (kill -9)
leaves its listener and its unfinished task to the other.

The agent is a small script speaking Claude Code's stream-json (fast, and it logs each run
with the daemon that started it); the sandbox is the host's."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write_config
from tests.fake_anthropic import FakeAnthropic
from tests.fake_slack import APP_TOKEN, BOT_TOKEN, TEAM, FakeSlack

ALICE, DM = "U0ALICE", "D0ALICE"
LEASE_S = 3.0

FAKE_AGENT = r"""#!/bin/sh
# Claude Code's stream-json, minimally. The reply names the message's msg-C-N word; each
# run is logged; a prompt with SLOW waits for the gate file.
prompt=$(cat)
word=$(printf '%s\n' "$prompt" | grep -o 'msg-[0-9]*-[0-9]*' | tail -n 1)
echo "$word" >> "{runs}"
case "$prompt" in
  *SLOW*) touch "{started}"; while [ ! -e "{gate}" ]; do sleep 0.05; done ;;
  *) sleep 0.2 ;;
esac
echo '{{"type":"system","subtype":"init","session_id":"fake-'$$'","model":"fake"}}'
echo '{{"type":"result","subtype":"success","is_error":false,"result":"Echo: '$word'",'\
'"session_id":"fake-'$$'","num_turns":1}}'
"""


class Deployment:
    """One config, one state directory, any number of replicas of it."""

    def __init__(
        self,
        gateway: Any,
        tmp_path: Path,
        repo: Path,
        api: FakeAnthropic,
        fake: FakeSlack,
        state_url: str | None = None,
    ) -> None:
        self.gateway = gateway
        self.fake = fake
        self.runs = tmp_path / "runs.log"
        self.started = tmp_path / "slow-started"
        self.gate = tmp_path / "slow-gate"
        agent = tmp_path / "fake-agent"
        agent.write_text(FAKE_AGENT.format(runs=self.runs, started=self.started, gate=self.gate))
        agent.chmod(0o755)
        slack = {
            "bot_token": BOT_TOKEN,
            "app_token": APP_TOKEN,
            "team_ids": [TEAM],
            "allowed_users": [ALICE],
            "api_base_url": fake.base_url,
            "reconnect_max_delay_seconds": 1.0,
        }
        self.config = write_config(
            tmp_path,
            repo,
            api,
            channels={"console": None, "slack": slack},
            agent={"command": [str(agent)], "timeout_seconds": 60},
            execution={"max_concurrent_tasks": 3},
            ha={"enabled": True, "lease_seconds": LEASE_S, "poll_seconds": 0.2},
            **({"state": {"url": state_url}} if state_url else {}),
        )
        self.replicas: list[Any] = []

    def start_replica(self) -> Any:
        """A replica that has joined the group (its listener lease may come later)."""
        replica = self.gateway("run", "--config", str(self.config))
        self.replicas.append(replica)
        wait_for(lambda: "joined (lease" in replica.stderr, "the replica to join", replica)
        return replica

    def runs_of(self) -> list[str]:
        """The msg-C-N word of every agent run, in the order they started."""
        return self.runs.read_text().split() if self.runs.exists() else []


def tasks_run(replica: Any) -> int:
    """Tasks the replica started (its log says so for each)."""
    return len(re.findall(r"task \S+ running \(slack", replica.stderr))


def wait_for(check: Callable[[], Any], what: str, process: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        if process.process.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}; stderr:\n{process.stderr[-8000:]}")


@pytest.fixture(params=["sqlite", "postgresql"])
def deployment(
    request: pytest.FixtureRequest,
    gateway: Any,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    fake_slack: FakeSlack,
) -> Iterator[Deployment]:
    """The replicas share the state directory's SQLite file, or a PostgreSQL server."""
    fake_slack.add_user(ALICE, "Alice")
    fake_slack.add_channel(DM, im_with=ALICE)
    url = request.getfixturevalue("postgres_url") if request.param == "postgresql" else None
    made = Deployment(gateway, tmp_path, target_repo, fake_api, fake_slack, url)
    yield made
    for replica in made.replicas:
        print(f"--- replica {replica.process.pid} stderr ---\n{replica.stderr[-20000:]}")


def answers(fake: FakeSlack, root: str) -> list[str]:
    """The bot's replies in a thread (its acknowledgements left out), in order."""
    return [
        m["text"].split("Echo: ", 1)[1].split()[0]
        for m in fake.bot_posts(DM, root)
        if "Echo: " in m.get("text", "")
    ]


def acknowledgements(fake: FakeSlack, root: str) -> list[str]:
    return [m["text"] for m in fake.bot_posts(DM, root) if "Echo: " not in m.get("text", "")]


def test_two_replicas_answer_thirty_messages_once_each_in_order_with_one_listener(
    deployment: Deployment, fake_slack: FakeSlack
) -> None:
    first = deployment.start_replica()
    fake_slack.wait_connected(1)
    second = deployment.start_replica()

    roots: list[str] = []
    for turn in range(3):
        for conversation in range(10):
            word = f"msg-{conversation}-{turn}"
            if turn == 0:
                roots.append(fake_slack.user_says(ALICE, DM, f"please echo {word}"))
            else:
                fake_slack.user_says(ALICE, DM, f"and {word}", thread_ts=roots[conversation])

    for conversation, root in enumerate(roots):
        expected = [f"msg-{conversation}-{turn}" for turn in range(3)]
        fake_slack.wait_until(
            lambda root=root, expected=expected: len(answers(fake_slack, root)) >= 3,
            timeout=120,
            what=f"three answers in conversation {conversation}",
        )
        assert answers(fake_slack, root) == expected, "each once, in the order asked"
        assert len(acknowledgements(fake_slack, root)) == 3, "one acknowledgement a message"

    runs = deployment.runs_of()
    for conversation in range(10):
        ran = [word for word in runs if word.startswith(f"msg-{conversation}-")]
        assert ran == [f"msg-{conversation}-{turn}" for turn in range(3)], "run once, in order"
    assert tasks_run(first) + tasks_run(second) == 30
    assert tasks_run(first) > 0, "both replicas ran tasks"
    assert tasks_run(second) > 0, "both replicas ran tasks"
    assert fake_slack.hellos == 1, "the Socket Mode listener ran on one replica only"
    holders = [r for r in (first, second) if "lease listener:slack: taken" in r.stderr]
    assert holders == [first]


def test_kill_9_of_the_listeners_replica_mid_task_the_other_takes_over(
    deployment: Deployment, fake_slack: FakeSlack
) -> None:
    holder = deployment.start_replica()
    fake_slack.wait_connected(1)
    slow_root = fake_slack.user_says(ALICE, DM, "SLOW msg-0-0")
    wait_for(deployment.started.exists, "the slow task to start on the first replica", holder)
    survivor = deployment.start_replica()
    assert deployment.runs_of() == ["msg-0-0"]

    holder.kill()  # kill -9, mid-task, with the Slack listener
    while_down = fake_slack.user_says(ALICE, DM, "meanwhile msg-1-0")
    deployment.gate.touch()  # the re-run must not wait

    fake_slack.wait_connected(2)  # the survivor took the listener
    fake_slack.wait_for_reply(DM, slow_root, "Echo: msg-0-0", timeout=120)
    fake_slack.wait_for_reply(DM, while_down, "Echo: msg-1-0", timeout=120)
    fake_slack.user_says(ALICE, DM, "then msg-0-1", thread_ts=slow_root)
    fake_slack.wait_for_reply(DM, slow_root, "Echo: msg-0-1", timeout=120)

    assert answers(fake_slack, slow_root) == ["msg-0-0", "msg-0-1"], "each answered once"
    assert answers(fake_slack, while_down) == ["msg-1-0"]
    assert sorted(deployment.runs_of()) == ["msg-0-0", "msg-0-0", "msg-0-1", "msg-1-0"], (
        "the interrupted task ran again, every other task once"
    )
    assert tasks_run(survivor) == 3
    assert "lease listener:slack: taken" in survivor.stderr
    assert re.search(r"replica \S+ missed its heartbeat", survivor.stderr)

    shown = status(deployment.config, "--json")["replicas"]
    [alive] = shown["replicas"]
    assert (alive["pid"], alive["alive"]) == (survivor.process.pid, True), "the dead one buried"
    leases = {lease["name"]: lease for lease in shown["leases"]}
    assert leases["listener:slack"]["holder"] == alive["id"]
    assert leases["listener:slack"]["token"] == 2, "taken over once"


def status(config: Path, *more: str) -> Any:
    """``gateway-bot status`` beside the replicas; its JSON when asked for."""
    done = subprocess.run(
        [sys.executable, "-m", "gateway_bot", "status", "--config", str(config), *more],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if more else done.stdout


def test_a_replica_stopped_cleanly_hands_its_listener_over_at_once(
    deployment: Deployment, fake_slack: FakeSlack
) -> None:
    holder = deployment.start_replica()
    fake_slack.wait_connected(1)
    survivor = deployment.start_replica()
    first = fake_slack.user_says(ALICE, DM, "before msg-0-0")
    fake_slack.wait_for_reply(DM, first, "Echo: msg-0-0", timeout=120)

    holder.process.send_signal(signal.SIGTERM)
    assert holder.wait(120) == 0, holder.stderr
    fake_slack.wait_connected(2)
    after = fake_slack.user_says(ALICE, DM, "after msg-1-0")
    fake_slack.wait_for_reply(DM, after, "Echo: msg-1-0", timeout=120)
    assert "lease listener:slack: taken" in survivor.stderr
    assert not re.search(r"missed its heartbeat", survivor.stderr), "it left, it did not die"
    assert answers(fake_slack, first) == ["msg-0-0"]
    assert answers(fake_slack, after) == ["msg-1-0"]
