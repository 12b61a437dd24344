"""Agent containers on a Podman host reached over ``ssh://`` (decision 0130).

The host (tests/support/ssh_podman_host.py) is Debian's sshd on 127.0.0.1 in a mount
namespace of its own, with a Podman service whose storage, run root and socket exist only
there: the daemon reaches its containers only through SSH, with the host key checked.
The conversation directories are still the daemon's state directory (this host is set to
share that disk, ``shares_state_dir: true``); test_ssh_host_no_shared_disk.py runs one that
does not.
"""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway_bot.config.sandbox import PodmanSettings
from gateway_bot.sandbox.base import HostUnreachable
from gateway_bot.sandbox.podman.service import PodmanService
from tests.conftest import write_config
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import APP_TOKEN, BOT_TOKEN, TEAM, FakeSlack
from tests.support.sandbox_fixtures import SandboxSetup, podman
from tests.support.ssh_podman_host import SshPodmanHost, make_key

pytestmark = pytest.mark.slow

ALICE, DM = "U0ALICE", "D0ALICE"


@pytest.fixture
def ssh_host(sandbox: SandboxSetup) -> Iterator[SshPodmanHost]:
    graph_root = podman("info", "--format", "{{.Store.GraphRoot}}").stdout.strip()
    host = SshPodmanHost(graph_root)
    try:
        host.start()
        yield host
    finally:
        host.stop()
    assert not host.namespace_processes(), "nothing of the ssh host is left running"


def _ssh_config(sandbox: SandboxSetup, host: SshPodmanHost, known_hosts: Path) -> Path:
    entry = {
        "name": "far",
        "url": host.url,
        "capacity": 2,
        "identity": str(host.client_key),
        "known_hosts": str(known_hosts),
        "shares_state_dir": True,  # shared storage at the same path: bind mounts
    }
    return sandbox.config(podman={"socket": str(sandbox.podman_socket), "hosts": [entry]})


def test_the_host_key_is_checked_and_nothing_of_the_host_is_on_this_side(
    ssh_host: SshPodmanHost, tmp_path: Path
) -> None:
    """Someone else answering on the host's address (here: the right host, but a
    known_hosts entry with another key, or none) gets no call: the host is unreachable.
    (podman-py's own ssh:// support, used before, ran ssh with host key checking off.)"""
    assert not Path(ssh_host.socket_path).exists(), "the host's socket exists only there"
    impostor_key = tmp_path / "other_key"
    make_key(impostor_key)
    other = Path(f"{impostor_key}.pub").read_text().split()
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"[127.0.0.1]:{ssh_host.port} {other[0]} {other[1]}\n")

    async def reach(known_hosts: Path) -> tuple[str, str]:
        service = PodmanService(
            PodmanSettings(),
            tmp_path / "log",
            url=ssh_host.url,
            host="far",
            ssh_identity=ssh_host.client_key,
            ssh_known_hosts=known_hosts,
        )
        try:
            await service.check()
            info = await service.api(lambda client: client.info())
            listed = await service.cli("ps", "-a", "--format", "{{.Names}}")
            return str(info["store"]["graphRoot"]), listed.stdout
        finally:
            await service.close()

    with pytest.raises(HostUnreachable, match="far"):
        asyncio.run(reach(wrong))  # a changed key
    unknown = tmp_path / "empty_known_hosts"
    unknown.write_text("")
    with pytest.raises(HostUnreachable, match="far"):
        asyncio.run(reach(unknown))  # a key nobody vouched for: not trusted on first use
    assert unknown.read_text() == "", "nothing was added to known_hosts"
    graph_root, _ = asyncio.run(reach(ssh_host.known_hosts))
    assert graph_root == str(ssh_host.remote_dir / "root")
    assert not Path(graph_root).exists(), "that storage is the other host's alone"


def test_a_conversation_on_the_ssh_host_runs_diffs_and_survives_drops_restarts_and_kill_9(
    gateway: Any, sandbox: SandboxSetup, ssh_host: SshPodmanHost, fake_api: FakeAnthropic
) -> None:
    config = str(_ssh_config(sandbox, ssh_host, ssh_host.known_hosts))
    chat = gateway("chat", "--config", config)
    chat.send("RUN_BASH printf 'far away\\n' > notes.txt && hostname")
    chat.expect(r"^agent> Echo: ")
    on_host = ssh_host.containers(sandbox.deployment)
    assert len(on_host) == 1, on_host
    assert sandbox.containers() == {}, "nothing runs on the daemon's own podman"
    context_id, container_id = next(iter(on_host.items()))
    assert ssh_host.drop_connections() >= 1, "the daemon's connection was up"

    # The next task connects again.

    chat.send("WRITE_FILE name=../outbox/report.txt text=made over ssh")
    sent = chat.expect(r"^  \[file\] .*/sent/[0-9a-f]{12}/report\.txt$")
    assert Path(sent.split("[file] ")[1]).read_text() == "made over ssh"
    chat.send("/diff")
    chat.expect(r"^Uncommitted changes:$")
    chat.expect(r"^ *A notes\.txt$")
    chat.expect(r"^ *\+far away$")
    chat.finish()

    # A restart reattaches: the same container, not a new one.
    second = gateway("chat", "--config", config)
    second.expect(rf"^gateway-bot console · conversation default \({context_id}\)")
    fake_api.hold("CRASH")
    second.send("CRASH over ssh")
    assert fake_api.wait_for_held(90), "the agent never reached the model"
    second.kill()  # mid-task

    third = gateway("chat", "--config", config)
    third.expect(rf"^gateway-bot console · conversation default \({context_id}\)")
    fake_api.release()
    third.expect(r"^agent> Echo: CRASH over ssh$")
    third.finish()
    assert third.count(r"^agent> ") == 1, "answered exactly once"
    assert ssh_host.containers(sandbox.deployment) == on_host, "the same container throughout"
    assert re.fullmatch(r"[0-9a-f]{64}", container_id)


def test_a_file_in_is_read_by_the_agent_on_the_ssh_host(
    gateway: Any, sandbox: SandboxSetup, ssh_host: SshPodmanHost, fake_slack: FakeSlack
) -> None:
    fake_slack.add_user(ALICE, "Alice")
    fake_slack.add_channel(DM, im_with=ALICE)
    entry = {
        "name": "far",
        "url": ssh_host.url,
        "identity": str(ssh_host.client_key),
        "known_hosts": str(ssh_host.known_hosts),
        "shares_state_dir": True,
    }
    slack = {
        "bot_token": BOT_TOKEN,
        "app_token": APP_TOKEN,
        "team_ids": [TEAM],
        "allowed_users": [ALICE],
        "api_base_url": fake_slack.base_url,
    }
    settings = {
        "kind": "podman",
        "deployment": sandbox.deployment,
        "egress_network": sandbox.egress.name,
        "podman": {"socket": str(sandbox.podman_socket), "hosts": [entry]},
    }
    env = {
        "ANTHROPIC_BASE_URL": sandbox.relay.url,
        "ANTHROPIC_API_KEY": "test-key",
        "CLAUDE_CODE_MAX_RETRIES": "0",
    }
    config = write_config(
        sandbox.tmp_path,
        sandbox.repo,
        sandbox.api,
        sandbox=settings,
        agent={"timeout_seconds": 120, "env": env},
        channels={"console": None, "slack": slack},
    )
    daemon = gateway("run", "--config", str(config))
    fake_slack.wait_connected(1)
    ts = fake_slack.user_says(
        ALICE, DM, "SHOW_RESULT RUN_BASH cat /inbox/data.csv", files=[("data.csv", b"far,file")]
    )
    reply = fake_slack.wait_for_reply(DM, ts, "Echo:")
    assert "[tool result: far,file]" in reply["text"], reply["text"]
    assert len(ssh_host.containers(sandbox.deployment)) == 1
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr


def test_a_host_that_does_not_see_the_state_directory_is_named_as_the_problem(
    gateway: Any, sandbox: SandboxSetup, tmp_path: Path
) -> None:
    """A host that shares no disk with the daemon (not even the state directory) cannot run
    a conversation yet (decision 0130's volumes are not built): the sender is told which
    host does not see which path, not podman's bare "statfs ... no such file"."""
    graph_root = podman("info", "--format", "{{.Store.GraphRoot}}").stdout.strip()
    host = SshPodmanHost(graph_root, hide=tmp_path)
    try:
        host.start()
        chat = gateway("chat", "--config", str(_ssh_config(sandbox, host, host.known_hosts)))
        chat.send("hello from a host without our disk")
        told = chat.expect(r"^error> ")
        chat.finish()
    finally:
        host.stop()
    state = re.escape(str(tmp_path / "state"))
    assert re.search(
        rf"host far does not see {state}/\S+: .*state directory at the same path", told
    )
