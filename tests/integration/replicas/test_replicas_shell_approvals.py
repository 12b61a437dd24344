"""`gateway-bot approve` against a deployment of replicas: it works whichever replica runs,
also one that does not hold the channel's listener.

The operator's steps: two replicas on one state directory (Slack, ``ha.enabled``), a
stranger's message waits for an owner, the owner approves from the shell; the replica that
started first is stopped for maintenance and the owner approves the next stranger; it is
started again (now without the listener) and approves a third. Before, only the first
replica served the control socket (the other logged "the control socket is not served ...
another daemon already listens"), so once it stopped no approval could be decided from the
shell at all ("The daemon is not running") though the other replica ran on.

The agent and the deployment are tests/support/replica_fixtures.py's."""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.integration.approvals.test_approvals_shell import shell
from tests.integration.replicas.test_replicas_slack import slack_channel
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import BOT_USER, FakeSlack
from tests.support.replica_fixtures import LEASE_S, Deployment, wait_for

pytestmark = pytest.mark.slow

ALICE, BOB, CAROL, DAVE = "U0ALICE", "U0BOB", "U0CAROL", "U0DAVE"
GENERAL, APPROVALS, DM = "C0GENERAL", "C0APPROVALS", "D0ALICE"
MENTION = f"<@{BOT_USER}>"
ACCESS = {
    "owners": {"slack": [ALICE]},
    "approval_destination": {"channel": "slack", "context": {"channel": APPROVALS}},
}


def _approve_next_stranger(
    deployment: Deployment, fake: FakeSlack, who: str, word: str
) -> tuple[Any, str]:
    """``who`` asks in #general; the owner approves from the shell. The shell's result and
    the asking message's ts."""
    cards = len(fake.messages[APPROVALS])
    asked = fake.user_says(who, GENERAL, f"{MENTION} {word}")
    fake.wait_until(lambda: len(fake.messages[APPROVALS]) > cards, what=f"a card about {who}")
    listed = shell("approvals", "--config", str(deployment.config), "--json")
    assert listed.returncode == 0, listed.stderr
    [code] = re.findall(r'"code": "([^"]+)"', listed.stdout)
    return shell("approve", code, "--as", ALICE, "--config", str(deployment.config)), asked


def test_an_owner_approves_from_the_shell_whichever_replica_runs(
    gateway: Any,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    fake_slack: FakeSlack,
) -> None:
    for user, name in ((ALICE, "Alice"), (BOB, "Bob"), (CAROL, "Carol"), (DAVE, "Dave")):
        fake_slack.add_user(user, name)
    fake_slack.add_channel(GENERAL, "general")
    fake_slack.add_channel(APPROVALS, "approvals")
    fake_slack.add_channel(DM, im_with=ALICE)
    deployment = Deployment(
        gateway, tmp_path, target_repo, fake_api, slack_channel(fake_slack),
        lease_seconds=LEASE_S, access=ACCESS,
    )  # fmt: skip
    try:
        first = deployment.start_replica()
        fake_slack.wait_connected(1)  # the first replica holds the listener
        second = deployment.start_replica()

        decided, asked = _approve_next_stranger(deployment, fake_slack, BOB, "msg-1-1")
        assert decided.returncode == 0, decided
        assert "Allowed Bob in" in decided.stdout
        fake_slack.wait_for_reply(GENERAL, asked, "Echo: msg-1-1")

        # The first replica goes down for maintenance; the second takes the listener over.
        first.process.send_signal(signal.SIGTERM)
        assert first.wait() == 0, first.stderr
        fake_slack.wait_connected(2)
        decided, asked = _approve_next_stranger(deployment, fake_slack, CAROL, "msg-2-1")
        assert decided.returncode == 0, (decided.stdout, decided.stderr)
        assert "Allowed Carol in" in decided.stdout
        fake_slack.wait_for_reply(GENERAL, asked, "Echo: msg-2-1")

        # Back from maintenance, without the listener: the shell reaches it (its socket is
        # the newest) and it decides as the listener's replica would.
        restarted = deployment.start_replica()
        wait_for(lambda: "control socket at" in restarted.stderr, "its control socket", restarted)
        decided, asked = _approve_next_stranger(deployment, fake_slack, DAVE, "msg-3-1")
        assert decided.returncode == 0, (decided.stdout, decided.stderr)
        assert "Allowed Dave in" in decided.stdout
        fake_slack.wait_for_reply(GENERAL, asked, "Echo: msg-3-1")
        assert "decided from the shell" in restarted.stderr, "the one without the listener decided"
        assert fake_slack.hellos == 2, "the listener stayed where it was"
        for replica in (second, restarted):
            assert "the control socket is not served" not in replica.stderr
        assert sorted(deployment.runs_of()) == ["msg-1-1", "msg-2-1", "msg-3-1"], "each once"
    finally:
        deployment.print_logs()
        for replica in deployment.replicas:
            if replica.process.poll() is None:
                replica.process.terminate()
                replica.wait()
