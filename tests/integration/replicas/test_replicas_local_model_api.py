"""A model API on the daemon's loopback (``ANTHROPIC_BASE_URL: http://127.0.0.1:PORT``, a
local gateway such as LiteLLM) with two Podman hosts on this machine and two replicas: every
conversation is answered, whichever host its container is on and whichever replica runs it.

The operator's steps: two ``podman system service`` hosts, ``sandbox.podman.hosts`` naming
both, the model API on 127.0.0.1, ``ha.enabled``, two replicas started. Before, the model
relay let in the first host's proxy only: every conversation placed on the second host got
"API Error: 502 Bad Gateway" (the log: "model relay: refused a connection from" that host's
proxy); and each replica relayed on a port of its own, so the agents' URL depended on the
replica that happened to run them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write_config
from tests.integration.sandbox.test_sandbox_hosts import PodmanHost, two_hosts
from tests.support.fake_slack import APP_TOKEN, BOT_TOKEN, TEAM, FakeSlack
from tests.support.replica_fixtures import STEADY_LEASE_S, wait_for
from tests.support.sandbox_fixtures import SandboxSetup

pytestmark = pytest.mark.slow

__all__ = ["two_hosts"]  # the fixture, used by name

ALICE, DM = "U0ALICE", "D0ALICE"


def _config(sandbox: SandboxSetup, alpha: PodmanHost, beta: PodmanHost, fake: FakeSlack) -> Path:
    hosts = [
        {"name": "alpha", "url": alpha.url, "capacity": 1},
        {"name": "beta", "url": beta.url, "capacity": 2},
    ]
    slack = {
        "bot_token": BOT_TOKEN,
        "app_token": APP_TOKEN,
        "team_ids": [TEAM],
        "allowed_users": [ALICE],
        "api_base_url": fake.base_url,
        "reconnect_max_delay_seconds": 1.0,
    }
    settings = {
        "kind": "podman",
        "deployment": sandbox.deployment,
        "egress_network": sandbox.egress.name,
        "podman": {"socket": str(sandbox.podman_socket), "hosts": hosts},
    }
    local = sandbox.api.base_url
    assert local.startswith("http://127.0.0.1:"), "the model API is on this host's loopback"
    env = {"ANTHROPIC_BASE_URL": local, "ANTHROPIC_API_KEY": "test-key"}
    return write_config(
        sandbox.tmp_path,
        sandbox.repo,
        sandbox.api,
        sandbox=settings,
        agent={"timeout_seconds": 120, "env": {**env, "CLAUDE_CODE_MAX_RETRIES": "0"}},
        channels={"console": None, "slack": slack},
        ha={"enabled": True, "lease_seconds": STEADY_LEASE_S, "poll_seconds": 0.2},
    )


def _relay_address(replica: Any) -> str:
    found = re.search(r"is reached through a relay at (\S+)", replica.stderr)
    assert found, replica.stderr[-4000:]
    return found[1]


def test_a_loopback_model_api_answers_conversations_on_every_host_from_every_replica(
    gateway: Any,
    sandbox: SandboxSetup,
    two_hosts: tuple[PodmanHost, PodmanHost],
    fake_slack: FakeSlack,
) -> None:
    alpha, beta = two_hosts
    fake_slack.add_user(ALICE, "Alice")
    fake_slack.add_channel(DM, im_with=ALICE)
    config = _config(sandbox, alpha, beta, fake_slack)
    replicas = []
    for _ in range(2):
        replica = gateway("run", "--config", str(config))
        replicas.append(replica)
        wait_for(lambda r=replica: "joined (lease" in r.stderr, "the replica to join", replica)
    fake_slack.wait_connected(1)
    try:
        # Free capacity decides the host: the first conversation goes to beta (2 free),
        # the second to alpha, the third to beta.
        threads = {}
        for word in ("first", "second", "third"):
            threads[word] = fake_slack.user_says(ALICE, DM, f"{word} conversation")
            fake_slack.wait_for_reply(DM, threads[word], f"Echo: {word} conversation")
        on_alpha = alpha.containers(sandbox.deployment)
        on_beta = beta.containers(sandbox.deployment)
        assert (len(on_alpha), len(on_beta)) == (1, 2), (on_alpha, on_beta)
        for word, thread in threads.items():
            posts = [m["text"] for m in fake_slack.bot_posts(DM, thread)]
            assert not [p for p in posts if "502" in p or "API Error" in p], (word, posts)
        assert _relay_address(replicas[0]) == _relay_address(replicas[1]), (
            "both replicas relay on one address: the agents' URL is the same whichever runs them"
        )
        for replica in replicas:
            assert "model relay: refused a connection" not in replica.stderr
    finally:
        for replica in replicas:
            replica.process.terminate()
        for replica in replicas:
            replica.wait()
