"""Messages sent while no Slack listener runs are answered once a listener runs again, read
back from the channel itself, whatever Slack's retries did meanwhile.

Slack retries an event it could not deliver only a few times (at once, after about a minute,
after five). Before, nothing fetched the messages sent while no listener ran: after a
failover they waited for Slack's next retry (61-72 s after the kill, with a 13 s lease),
and after a longer outage they were never answered, and nobody was told. Here the fake
Slack's retry window passes while no listener runs (``gives_up_retries``): what the user
sent is only in the channel's history, as with a real outage of that length.

Operator's steps: a single daemon stopped for longer than Slack retries, then started; and
two replicas, the listener's killed (kill -9), a message sent before the other takes over.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from tests.integration.replicas.test_replicas_slack import slack_channel
from tests.integration.slack.test_slack_daemon import slack_config, start_socket_daemon
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import FakeSlack
from tests.support.replica_fixtures import LEASE_S, Deployment, tasks_run, wait_for

pytestmark = pytest.mark.slow

ALICE, DM = "U0ALICE", "D0ALICE"


def _answers(fake: FakeSlack, root: str, text: str) -> list[str]:
    return [t for t in fake.texts(DM, root) if text in t]


def test_messages_sent_while_the_daemon_was_down_longer_than_slack_retries_are_answered_once(
    gateway: Any, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    fake_slack.add_user(ALICE, "Alice")
    fake_slack.add_channel(DM, im_with=ALICE)
    config = slack_config(tmp_path, target_repo, fake_api, fake_slack)
    daemon = start_socket_daemon(gateway, fake_slack, config)
    first = fake_slack.user_says(ALICE, DM, "before the outage")
    fake_slack.wait_for_reply(DM, first, "Echo: before the outage")

    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr
    while_down = fake_slack.user_says(ALICE, DM, "sent while it was down")
    fake_slack.user_says(ALICE, DM, "a follow-up in the first thread", thread_ts=first)
    assert fake_slack.gives_up_retries(), "Slack could deliver none of them"

    daemon = start_socket_daemon(gateway, fake_slack, config, hellos=2)
    fake_slack.wait_for_reply(DM, while_down, "Echo: sent while it was down")
    fake_slack.wait_for_reply(DM, first, "Echo: a follow-up in the first thread")
    later = fake_slack.user_says(ALICE, DM, "after the restart")
    fake_slack.wait_for_reply(DM, later, "Echo: after the restart")
    assert len(_answers(fake_slack, first, "Echo: before the outage")) == 1, "not run again"
    assert len(_answers(fake_slack, while_down, "Echo: sent while it was down")) == 1
    assert len(_answers(fake_slack, first, "Echo: a follow-up in the first thread")) == 1
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr


def test_a_message_sent_in_the_failover_gap_is_answered_by_the_replica_that_takes_over(
    gateway: Any, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    fake_slack.add_user(ALICE, "Alice")
    fake_slack.add_channel(DM, im_with=ALICE)
    deployment = Deployment(
        gateway, tmp_path, target_repo, fake_api, slack_channel(fake_slack), lease_seconds=LEASE_S
    )
    try:
        holder = deployment.start_replica()
        fake_slack.wait_connected(1)
        other = deployment.start_replica()
        root = fake_slack.user_says(ALICE, DM, "msg-1-1 before")
        fake_slack.wait_for_reply(DM, root, "Echo: msg-1-1")

        holder.kill()  # kill -9: its lease runs out before the other may listen
        gap = fake_slack.user_says(ALICE, DM, "msg-2-1 in the gap")
        follow_up = fake_slack.user_says(ALICE, DM, "msg-1-2 in the gap", thread_ts=root)
        assert fake_slack.gives_up_retries(), "nobody was connected to take them"
        fake_slack.wait_connected(2)

        fake_slack.wait_for_reply(DM, gap, "Echo: msg-2-1")
        fake_slack.wait_for_reply(DM, root, "Echo: msg-1-2")
        assert follow_up
        assert sorted(deployment.runs_of()) == ["msg-1-1", "msg-1-2", "msg-2-1"], "each once"
        wait_for(lambda: tasks_run(other, "slack") >= 2, "the other replica ran them", other)
    finally:
        deployment.print_logs()
        for replica in deployment.replicas:
            replica.terminate()
