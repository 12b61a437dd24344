"""Two daemons (replicas) on one state database with the same config, talking Slack through
the fake: the listener runs on one of them only, every message is answered exactly once and
in order per conversation whichever replica runs it, and a replica killed mid-task (kill -9)
leaves its listener and its unfinished task to the other.

The agent and the deployment are tests/support/replica_fixtures.py's."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.schedules.test_schedules_channels import LATER, card_buttons, moved_clock
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import APP_TOKEN, BOT_TOKEN, TEAM, FakeSlack
from tests.support.replica_fixtures import (
    LEASE_S,
    STEADY_LEASE_S,
    Deployment,
    status,
    tasks_run,
    wait_for,
)

ALICE, DM = "U0ALICE", "D0ALICE"


def make_deployment(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    fake_slack: FakeSlack,
    lease_seconds: float,
) -> Iterator[Deployment]:
    """The replicas share the state directory's SQLite file, or a PostgreSQL server."""
    fake_slack.add_user(ALICE, "Alice")
    fake_slack.add_channel(DM, im_with=ALICE)
    url = request.getfixturevalue("postgres_url") if request.param == "postgresql" else None
    made = Deployment(
        request.getfixturevalue("gateway"), tmp_path, target_repo, fake_api,
        slack_channel(fake_slack), url, lease_seconds=lease_seconds,
    )  # fmt: skip
    yield made
    made.print_logs()


@pytest.fixture(params=["sqlite", "postgresql"])
def deployment(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    fake_slack: FakeSlack,
) -> Iterator[Deployment]:
    """Replicas none of which is meant to fail over (``STEADY_LEASE_S``)."""
    yield from make_deployment(request, tmp_path, target_repo, fake_api, fake_slack, STEADY_LEASE_S)


@pytest.fixture(params=["sqlite", "postgresql"])
def failing_over(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    fake_slack: FakeSlack,
) -> Iterator[Deployment]:
    """Replicas one of which dies: its work moves within seconds (``LEASE_S``)."""
    yield from make_deployment(request, tmp_path, target_repo, fake_api, fake_slack, LEASE_S)


def slack_channel(fake: FakeSlack) -> dict[str, Any]:
    """The Slack channel's settings, on the fake, Alice allowed."""
    return {
        "slack": {
            "bot_token": BOT_TOKEN,
            "app_token": APP_TOKEN,
            "team_ids": [TEAM],
            "allowed_users": [ALICE],
            "api_base_url": fake.base_url,
            "reconnect_max_delay_seconds": 1.0,
        }
    }


def answers(fake: FakeSlack, root: str) -> list[str]:
    """The bot's replies in a thread (its acknowledgements left out), in order."""
    return [
        m["text"].split("Echo: ", 1)[1].split()[0]
        for m in fake.bot_posts(DM, root)
        if "Echo: " in m.get("text", "")
    ]


def acknowledgements(fake: FakeSlack, root: str) -> list[str]:
    return [m["text"] for m in fake.bot_posts(DM, root) if "Echo: " not in m.get("text", "")]


def replies(fake: FakeSlack, root: str) -> list[str]:
    """The bot's replies in a thread, whatever they say (an error too), in order: its posts
    of kind "reply" (the adapter's metadata), not its acknowledgements."""
    return [
        m["text"]
        for m in fake.bot_posts(DM, root)
        if (m.get("metadata") or {}).get("event_payload", {}).get("kind") == "reply"
    ]


def what_happened(fake: FakeSlack, deployment: Deployment, root: str) -> str:
    """A thread's replies and its tasks as the state database has them (for a failure)."""
    return f"replies: {replies(fake, root)}; tasks: {deployment.tasks_of(root)}"


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
        try:
            fake_slack.wait_until(
                lambda root=root: len(replies(fake_slack, root)) >= 3,
                timeout=120,
                what=f"three replies in conversation {conversation}",
            )
        except AssertionError as exc:
            what = what_happened(fake_slack, deployment, root)
            raise AssertionError(f"conversation {conversation} stalled: {what}") from exc
        assert answers(fake_slack, root) == expected, (
            f"each once, in the order asked: {what_happened(fake_slack, deployment, root)}"
        )
        assert len(acknowledgements(fake_slack, root)) == 3, "one acknowledgement a message"

    runs = deployment.runs_of()
    for conversation in range(10):
        ran = [word for word in runs if word.startswith(f"msg-{conversation}-")]
        assert ran == [f"msg-{conversation}-{turn}" for turn in range(3)], "run once, in order"
    assert tasks_run(first, "slack") + tasks_run(second, "slack") == 30
    assert tasks_run(first, "slack") > 0, "both replicas ran tasks"
    assert tasks_run(second, "slack") > 0, "both replicas ran tasks"
    assert fake_slack.hellos == 1, "the Socket Mode listener ran on one replica only"
    holders = [r for r in (first, second) if "lease listener:slack: taken" in r.stderr]
    assert holders == [first]


def test_kill_9_of_the_listeners_replica_mid_task_the_other_takes_over(
    failing_over: Deployment, fake_slack: FakeSlack
) -> None:
    deployment = failing_over
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
    assert tasks_run(survivor, "slack") == 3
    assert "lease listener:slack: taken" in survivor.stderr
    assert re.search(r"replica \S+ missed its heartbeat", survivor.stderr)

    shown = status(deployment.config, "--json")["replicas"]
    [alive] = shown["replicas"]
    assert (alive["pid"], alive["alive"]) == (survivor.process.pid, True), "the dead one buried"
    leases = {lease["name"]: lease for lease in shown["leases"]}
    assert leases["listener:slack"]["holder"] == alive["id"]
    assert leases["listener:slack"]["token"] == 2, "taken over once"


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


ASKING_AGENT = r"""#!{python}
# Claude Code with action approvals, minimally: the prompt comes in as a stream-json user
# message; a prompt with PUSH asks to run "git push" (a control request) and waits for the
# daemon's answer. The reply names the msg-C-N word and the answer (allow or deny).
import json, re, sys

pytestmark = pytest.mark.slow
message = json.loads(sys.stdin.readline())["message"]["content"][0]["text"]
word = re.findall(r"msg-[0-9]+-[0-9]+", message)[-1]
with open("{runs}", "a") as runs:
    print(word, file=runs)
print(json.dumps({{"type": "system", "subtype": "init", "session_id": "s", "model": "fake"}}))
answer = ""
if "PUSH" in message:
    ask = {{"subtype": "can_use_tool", "tool_name": "Bash", "tool_use_id": "t1",
           "input": {{"command": "git push origin main"}}}}
    print(json.dumps({{"type": "control_request", "request_id": "r1", "request": ask}}))
    sys.stdout.flush()
    for line in sys.stdin:
        data = json.loads(line)
        if data.get("type") == "control_response":
            answer = " " + data["response"]["response"]["behavior"]
            break
elif "SLOW" in message:
    open("{started}", "w").close()
    import os, time
    while not os.path.exists("{gate}"):
        time.sleep(0.05)
print(json.dumps({{"type": "result", "subtype": "success", "is_error": False, "num_turns": 1,
                  "result": "Echo: " + word + answer, "session_id": "s"}}))
"""


def test_an_action_card_pressed_on_the_listeners_replica_lets_the_task_on_the_other_go_on(
    gateway: Any,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    fake_slack: FakeSlack,
) -> None:
    """The task asking runs on the replica without the listener (the listener's replica is
    busy with a slow task, one conversation at a time); the press reaches the listener's
    replica, which records it; the asking replica sees it and the push is allowed."""
    fake_slack.add_user(ALICE, "Alice")
    fake_slack.add_channel(DM, im_with=ALICE)
    deployment = Deployment(
        gateway, tmp_path, target_repo, fake_api, slack_channel(fake_slack),
        max_concurrent_tasks=1, agent_script=ASKING_AGENT,
        agent_settings={"approvals": {"timeout_s": 30}}, lease_seconds=STEADY_LEASE_S,
    )  # fmt: skip
    try:
        listening = deployment.start_replica()
        fake_slack.wait_connected(1)
        slow_root = fake_slack.user_says(ALICE, DM, "SLOW msg-0-0")
        wait_for(deployment.started.exists, "the slow task on the listener's replica", listening)
        other = deployment.start_replica()

        push_root = fake_slack.user_says(ALICE, DM, "PUSH msg-1-0")
        card = fake_slack.wait_until(
            lambda: next((m for m in fake_slack.bot_posts(DM, push_root) if card_buttons(m)), None),
            what="the action card in the thread",
            timeout=120,
        )
        assert tasks_run(other, "slack") == 1, "the asking task runs on the other replica"
        once = next(a for a in card_buttons(card) if a.endswith(":once"))
        fake_slack.click(ALICE, DM, card["ts"], once)

        reply = fake_slack.wait_for_reply(DM, push_root, "Echo: msg-1-0", timeout=120)
        assert reply["text"].startswith("Echo: msg-1-0 allow"), reply["text"]
        assert re.search(r"action approval \S+: allowed \(recorded by another", other.stderr)
        assert re.search(r"action approval \S+: allowed by \S+", listening.stderr)
        deployment.gate.touch()
        fake_slack.wait_for_reply(DM, slow_root, "Echo: msg-0-0", timeout=120)
        assert tasks_run(listening, "slack") == 1
    finally:
        deployment.print_logs()


def test_two_replicas_fire_a_one_off_schedule_once_on_the_listeners_replica(
    gateway: Any,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    fake_slack: FakeSlack,
) -> None:
    """Both replicas run the schedules' loop on the same (moved) clock; the run is fired by
    the replica holding the Slack listener, once: one notice, one run, one answer."""
    fake_slack.add_user(ALICE, "Alice")
    fake_slack.add_channel(DM, im_with=ALICE)
    clock, env = moved_clock(tmp_path)
    deployment = Deployment(
        gateway, tmp_path, target_repo, fake_api, slack_channel(fake_slack),
        lease_seconds=STEADY_LEASE_S,
    )  # fmt: skip
    try:
        listening = deployment.start_replica(env)
        fake_slack.wait_connected(1)
        other = deployment.start_replica(env)
        root = fake_slack.user_says(ALICE, DM, "!schedule in 2 hours SCHEDULED msg-5-0")
        fake_slack.wait_for_reply(DM, root, "Scheduled #1", timeout=120)

        clock.write_text(str(LATER))
        fake_slack.wait_for_reply(DM, root, "Echo: msg-5-0", timeout=120)
        clock.write_text(str(LATER * 3))  # long past it: a one-off still runs once
        fake_slack.user_says(ALICE, DM, "and msg-5-1", thread_ts=root)
        fake_slack.wait_for_reply(DM, root, "Echo: msg-5-1", timeout=120)

        texts = fake_slack.texts(DM, root)
        assert sum("Scheduled run #1" in t for t in texts) == 1, texts
        assert answers(fake_slack, root) == ["msg-5-0", "msg-5-1"]
        assert deployment.runs_of() == ["msg-5-0", "msg-5-1"]
        fired = [r for r in (listening, other) if re.search(r"schedule 1: run due", r.stderr)]
        assert fired == [listening], "fired where the listener runs"
    finally:
        deployment.print_logs()
