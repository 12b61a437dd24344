"""A conversation on an ``ssh://`` Podman host that does not see the daemon's conversation
directories (decision 0130): its workspace, home, inbox, outbox and storage are volumes
there, reached only through that host's Podman API over the daemon's SSH connection.

The host (tests/support/ssh_podman_host.py) runs in a mount namespace of its own in which
the daemon's ``<state>/conversations``, ``<state>/sandbox`` (the egress proxy's directory)
and gateway-bot's init directory are empty tmpfs: a bind mount of any conversation
directory, of the proxy's routes, CA or logs, or of the init, would fail there. One host
serves the whole module (one scenario, as a user would go through it): a task (the model
API through that host's proxy), a request the allowlist refuses, a file out, /diff, a
restart that reattaches, a kill mid-task answered once, a file sent in over Slack read by
the agent, and the dashboard's network log of the conversation, read through the host's
API.
"""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import ClientSession, CookieJar

from gateway_bot.config.server import load_server_config
from gateway_bot.runtime.agent_setup import agent_image_files
from gateway_bot.sandbox.base import ExecutionContext
from gateway_bot.sandbox.egress.held import HeldRequest
from gateway_bot.sandbox.egress.rules import EgressRule
from gateway_bot.sandbox.podman.sandbox import PodmanSandbox
from gateway_bot.sandbox.podman.service import INIT_ON_HOST
from tests.conftest import write_config
from tests.integration.dashboard.test_dashboard_run import TOKEN, dashboard_url
from tests.integration.dashboard.test_dashboard_security import FROM_THE_DASHBOARD
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import APP_TOKEN, BOT_TOKEN, TEAM, FakeSlack
from tests.support.sandbox_fixtures import SandboxSetup, per_run, podman
from tests.support.ssh_podman_host import SshPodmanHost

pytestmark = pytest.mark.slow

ALICE, DM = "U0ALICE", "D0ALICE"
DIRECTORIES = ("workspace", "home", "inbox", "outbox", "storage")


@pytest.fixture
def far_host(sandbox: SandboxSetup) -> Iterator[SshPodmanHost]:
    conversations = sandbox.tmp_path / "state" / "conversations"
    conversations.mkdir(parents=True)
    proxy_side = sandbox.tmp_path / "state" / "sandbox"  # routes, CA, logs: the daemon's
    proxy_side.mkdir(parents=True)
    graph_root = podman("info", "--format", "{{.Store.GraphRoot}}").stdout.strip()
    # Nor gateway-bot's init: the host gets it from the daemon, in a read-only volume.
    host = SshPodmanHost(
        graph_root, hide=conversations, also_hide=(proxy_side, INIT_ON_HOST.parent)
    )
    try:
        host.start()
        yield host
    finally:
        host.stop()
    assert not host.namespace_processes(), "nothing of the ssh host is left running"


def _config(sandbox: SandboxSetup, host: SshPodmanHost, *, slack: FakeSlack | None) -> Path:
    entry = {  # no shares_state_dir: an ssh:// host shares nothing unless told
        "name": "far",
        "url": host.url,
        "identity": str(host.client_key),
        "known_hosts": str(host.known_hosts),
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
    channels: dict[str, Any] = {"console": {}}
    if slack is not None:
        channels = {
            "console": None,
            "slack": {
                "bot_token": BOT_TOKEN,
                "app_token": APP_TOKEN,
                "team_ids": [TEAM],
                "allowed_users": [ALICE],
                "api_base_url": slack.base_url,
            },
        }
    return write_config(
        sandbox.tmp_path,
        sandbox.repo,
        sandbox.api,
        sandbox=settings,
        agent={"timeout_seconds": 120, "env": env},
        channels=channels,
    )


def test_a_host_without_our_disk_runs_a_conversation_end_to_end(
    gateway: Any,
    sandbox: SandboxSetup,
    far_host: SshPodmanHost,
    fake_api: FakeAnthropic,
    fake_slack: FakeSlack,
) -> None:
    conversations = sandbox.tmp_path / "state" / "conversations"
    assert not far_host.exists_here(str(far_host.socket_path))
    config = str(_config(sandbox, far_host, slack=None))
    chat = gateway("chat", "--config", config)
    chat.send("RUN_BASH printf 'far away\\n' > notes.txt && git log --oneline | wc -l")
    chat.expect(r"^agent> Echo: ")
    on_host = far_host.containers(sandbox.deployment)
    assert len(on_host) == 1, on_host
    assert sandbox.containers() == {}, "nothing runs on the daemon's own podman"
    context_id, container_id = next(iter(on_host.items()))
    volumes = set(far_host.remote("volume", "ls", "--format", "{{.Name}}").stdout.split())
    assert {f"gwb-{context_id}-{d}" for d in DIRECTORIES} <= volumes
    assert any(v.startswith("gwb-init-") for v in volumes), volumes
    for directory in DIRECTORIES:  # the conversation's files are the host's alone
        assert not (conversations / context_id / directory).exists(), directory
    proxy_volumes = {f"gwb-proxy-{sandbox.deployment}-{d}" for d in ("egress", "logs")}
    assert proxy_volumes <= volumes, volumes
    # A host the allowlist does not name: the host's proxy refuses it, with its reason.
    chat.send(
        "SHOW_RESULT RUN_BASH exec 3<>/dev/tcp/proxy/8080 && printf 'GET "
        "http://blocked.example.test/ HTTP/1.1\\r\\nHost: blocked.example.test\\r\\n"
        "Connection: close\\r\\n\\r\\n' >&3 && timeout 20 cat <&3"
    )
    chat.expect(r"host blocked\.example\.test is not in the network allowlist")
    # The CA the agent trusts came from the host's proxy volume (no bind mount of ours).
    chat.send("SHOW_RESULT RUN_BASH grep -c 'BEGIN CERTIFICATE' $NODE_EXTRA_CA_CERTS")
    chat.expect(r"\[tool result: 1\]")

    chat.send("WRITE_FILE name=../outbox/report.txt text=made on a host without our disk")
    sent = chat.expect(r"^  \[file\] .*/sent/[0-9a-f]{12}/report\.txt$")
    assert Path(sent.split("[file] ")[1]).read_text() == "made on a host without our disk"
    # What a hostile agent leaves in its outbox comes back in podman's tar: a link to a
    # file (of the container, or a path that is the daemon's on this machine), a FIFO, a
    # directory's file. Only the regular file goes out.
    secret = sandbox.tmp_path / "daemon-secret.txt"
    secret.write_text("the daemon's own")
    chat.send(
        f"RUN_BASH cd /outbox && ln -s {secret} secret.txt && ln -s /etc/passwd passwd "
        "&& mkfifo pipe && mkdir sub && echo deep > sub/deep.txt && echo plain > plain.txt"
    )
    plain = chat.expect(r"^  \[file\] .*/sent/[0-9a-f]{12}/plain\.txt$")
    sent_dir = Path(plain.split("[file] ")[1]).parent
    assert sorted(p.name for p in sent_dir.iterdir()) == ["plain.txt"]
    chat.send("/diff")
    chat.expect(r"^Uncommitted changes:$")
    chat.expect(r"^ *A notes\.txt$")
    chat.expect(r"^ *\+far away$")
    chat.finish()
    assert not chat.count(r"\[file\] .*/(secret\.txt|passwd|pipe|deep\.txt)$")
    left = far_host.remote("cp", f"gwb-{context_id}:/outbox", "-").stdout  # a tar of it
    assert "report.txt" not in left, "a file sent is taken from the outbox"

    # A restart reattaches: the same container, not a new one; killed mid-task, the message
    # is answered once by the next start.
    second = gateway("chat", "--config", config)
    second.expect(rf"^gateway-bot console · conversation default \({context_id}\)")
    fake_api.hold("CRASH")
    second.send("CRASH far away")
    assert fake_api.wait_for_held(90), "the agent never reached the model"
    second.kill()
    third = gateway("chat", "--config", config)
    third.expect(rf"^gateway-bot console · conversation default \({context_id}\)")
    fake_api.release()
    third.expect(r"^agent> Echo: CRASH far away$")
    third.send("SHOW_RESULT RUN_BASH cat notes.txt")
    third.expect(r"far away")
    # Init comes from the host's read-only volume: the agent cannot put its own program
    # there for the next start to run as PID 1.
    third.send("SHOW_RESULT RUN_BASH cp /bin/true /run/gateway-bot/init 2>&1 || echo refused")
    third.expect(r"[Rr]ead-only file system.*refused")
    third.finish()
    assert third.count(r"^agent> Echo: CRASH") == 1, "answered exactly once"
    assert far_host.containers(sandbox.deployment) == on_host, "the same container throughout"
    assert container_id

    # A file in: a Slack attachment lands in the inbox volume, and the agent reads it.
    fake_slack.add_user(ALICE, "Alice")
    fake_slack.add_channel(DM, im_with=ALICE)
    config_path = _config(sandbox, far_host, slack=fake_slack)
    settings = yaml.safe_load(config_path.read_text())
    settings["dashboard"] = {"port": 0, "token": TOKEN}
    config_path.write_text(yaml.safe_dump(settings))
    daemon = gateway("run", "--config", str(config_path))
    fake_slack.wait_connected(1)
    ts = fake_slack.user_says(
        ALICE, DM, "SHOW_RESULT RUN_BASH cat /inbox/data.csv", files=[("data.csv", b"far,file")]
    )
    reply = fake_slack.wait_for_reply(DM, ts, "Echo:")
    assert "[tool result: far,file]" in reply["text"], reply["text"]
    assert len(far_host.containers(sandbox.deployment)) == 2
    # The console conversation's network log, as the dashboard shows it: read from the
    # host's proxy volume through its API.
    page = asyncio.run(_conversation_page(dashboard_url(daemon), context_id))
    network = page[page.index("<h2>Network</h2>") :]
    assert re.search(r'<tr class="allowed">.*?<td>POST</td><td><code>[^<]*/v1/messages', network)
    assert re.search(
        r'<tr class="blocked">.*?<code>http://blocked\.example\.test/</code>', network
    ), network
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr


async def _conversation_page(base: str, context_id: str) -> str:
    async with ClientSession(
        cookie_jar=CookieJar(unsafe=True), headers=FROM_THE_DASHBOARD
    ) as browser:
        await browser.post(base + "login", data={"token": TOKEN})
        return await (await browser.get(base + f"conversations/{context_id}")).text()


def test_a_request_held_on_that_host_is_decided_by_the_daemon(
    sandbox: SandboxSetup, far_host: SshPodmanHost, tmp_path: Path
) -> None:
    """A push (the default ask rule) held by that host's proxy reaches the daemon's seam
    through the reverse forward of its SSH connection: refused, then let through; and again
    by the next daemon (the socket the last connection left on the host is replaced)."""
    config = load_server_config(_config(sandbox, far_host, slack=None))
    asked: list[HeldRequest] = []
    answers = [(False, "not now"), (True, "go ahead"), (True, "after a restart")]

    async def owner(held: HeldRequest) -> tuple[bool, str]:
        asked.append(held)
        return answers.pop(0)

    relay = sandbox.relay
    push = (
        "exec 3<>/dev/tcp/proxy/8080 && printf 'POST "
        f"http://{relay.host}:{relay.port}/r.git/git-receive-pack HTTP/1.1\\r\\n"
        f"Host: {relay.host}:{relay.port}\\r\\nContent-Length: 0\\r\\nConnection: close"
        "\\r\\n\\r\\n' >&3 && timeout 30 cat <&3"
    )
    dirs = {d: tmp_path / "ctx" / d for d in DIRECTORIES}
    for path in dirs.values():
        path.mkdir(parents=True)
    context = ExecutionContext(
        id=per_run("asker"),
        allowlist=(EgressRule(relay.host, ports=(relay.port,)),),
        network_log=tmp_path / "ctx" / "network.log",
        **dirs,
    )

    async def go(pushes: int) -> list[str]:
        daemon = PodmanSandbox(config.sandbox, config.state_dir, agent_image_files(config))
        daemon.set_egress_ask(owner)
        said = []
        try:
            for _ in range(pushes):
                process = await daemon.start(context, ["bash", "-c", push], {})
                async with asyncio.timeout(120):
                    said.append((await process.stdout.read()).decode())
                    await process.wait()
        finally:
            await daemon.close()
        return said

    refused, allowed = asyncio.run(go(2))
    assert refused.startswith("HTTP/1.1 403"), refused
    assert "not now" in refused, refused
    assert allowed.startswith("HTTP/1.1 404"), allowed  # the fake API's own: let through
    (again,) = asyncio.run(go(1))
    assert again.startswith("HTTP/1.1 404"), again
    assert [(h.method, h.path) for h in asked] == [("POST", "/r.git/git-receive-pack")] * 3
