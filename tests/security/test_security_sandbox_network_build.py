"""Attacks on the host through the network and the image build: a repo Containerfile using
CVE-2024-1753's bind mount, a repo Containerfile whose build steps reach for the network
(or for all of the host's memory),
and an agent that ignores its proxy and dials the host over IPv4 and IPv6 link-local.
Real daemon, real podman, real proxy (decision 0052, items 2 and 5)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway_bot.cli.check_sandbox import link_local_address
from gateway_bot.sandbox.canary import CountingListener
from tests.support.sandbox_fixtures import SandboxSetup, commit_file, podman, wait_until


def test_a_repo_containerfile_with_the_cve_2024_1753_mount_is_refused_before_any_build(
    gateway: Any, sandbox: SandboxSetup, tmp_path: Path
) -> None:
    marker = tmp_path / "written-by-the-build"
    exploit = (
        "ARG BASE_IMAGE\nFROM ${BASE_IMAGE} AS base\nRUN ln -s / /rootfs\n"
        "FROM ${BASE_IMAGE}\n"
        f"RUN --mount=type=bind,rw,source=/rootfs,target=/mnt,from=base touch /mnt{marker}\n"
    )
    commit_file(sandbox.repo, ".gateway/Containerfile", exploit)
    chat = gateway("chat", "--config", str(sandbox.config()))
    chat.send("hello")
    chat.expect(r"^error> The sandbox could not run this task: the repo's \.gateway/Containerfile")
    chat.close_input()
    assert chat.wait() == 0
    shown = "\n".join(chat.lines)
    assert "--mount may not appear in a repo Containerfile" in shown
    assert "line 5: RUN flags are not allowed" in shown
    assert not marker.exists()
    assert not sandbox.api.requests, "no agent ran"


PROBE = """\
ARG BASE_IMAGE
FROM ${{BASE_IMAGE}}
COPY claude /usr/local/bin/claude
RUN (timeout 5 bash -c 'exec 3<>/dev/tcp/{host}/{port}' && echo reached || echo no-network) \
    > /build-probe.txt; grep CapEff /proc/self/status >> /build-probe.txt; \
    (cat /sys/fs/cgroup/memory.max || cat /sys/fs/cgroup/memory/memory.limit_in_bytes) \
    >> /build-probe.txt 2>/dev/null
WORKDIR /workspace
"""


def test_a_repo_containerfile_builds_without_network_and_with_few_capabilities(
    gateway: Any, sandbox: SandboxSetup
) -> None:
    # The relay to the fake model API listens on the host side of the egress network: a
    # build step on an ordinary podman network reaches it.
    probe = PROBE.format(host=sandbox.relay.host, port=sandbox.relay.port)
    commit_file(sandbox.repo, ".gateway/Containerfile", probe)
    chat = gateway("chat", "--config", str(sandbox.config(limits={"memory": "1500m"})))
    chat.send("RUN_BASH cp /build-probe.txt /outbox/")
    chat.expect(r"^agent> Echo:", timeout=600)
    chat.expect(r"\[file\] .*build-probe\.txt")
    chat.close_input()
    assert chat.wait() == 0
    context_id, _ = sandbox.only_container()
    report = next((sandbox.conversation_dir(context_id) / "sent").rglob("build-probe.txt"))
    lines = report.read_text().splitlines()
    assert lines[0] == "no-network", "a build step of the repo reached the host's network"
    effective = int(lines[1].split()[1], 16)
    cap_sys_admin, cap_net_raw, cap_mknod = 1 << 21, 1 << 13, 1 << 27
    assert effective & (cap_sys_admin | cap_net_raw | cap_mknod) == 0
    assert effective != 0, "package installs keep chown/setuid"
    assert lines[2] == str(1500 * 1024 * 1024), "a build step had the host's memory (a RUN "
    "allocating without end made the kernel kill host processes)"


@pytest.fixture
def listeners() -> Iterator[list[CountingListener]]:
    made: list[CountingListener] = []
    yield made
    for listener in made:
        listener.close()


def test_the_agent_cannot_reach_the_host_directly_over_ipv4_or_ipv6(
    gateway: Any, sandbox: SandboxSetup, listeners: list[CountingListener]
) -> None:
    chat = gateway("chat", "--config", str(sandbox.config()))
    chat.send("hello")
    chat.expect(r"^agent> Echo: hello")
    context_id, container = sandbox.only_container()
    network = json.loads(podman("network", "inspect", f"gwb-net-{context_id}").stdout)[0]
    bridge = network["network_interface"]
    wait_until(lambda: link_local_address(bridge) is not None, f"a link-local on {bridge}", 30)
    bridge_v6 = link_local_address(bridge)
    assert bridge_v6 is not None
    v6 = CountingListener(socket.AF_INET6, (bridge_v6, 0, 0, socket.if_nametoindex(bridge)))
    v4 = CountingListener(socket.AF_INET, (sandbox.relay.host, 0))
    listeners += [v6, v4]
    # Positive control: the listeners answer on the host's side.
    with socket.create_connection((f"{bridge_v6}%{bridge}", v6.port), timeout=5) as probe:
        assert probe.recv(100).startswith(b"gateway-bot canary listener")
    assert v6.connections == 1

    attempts = {
        "ipv6 link-local": f"fe80::{bridge_v6.split('fe80::', 1)[1]}%eth0/{v6.port}",
        "ipv4": f"{sandbox.relay.host}/{v4.port}",
    }
    for what, target in attempts.items():
        result = sandbox.exec(
            container["name"],
            f"unset HTTPS_PROXY HTTP_PROXY https_proxy http_proxy; "
            f"timeout 5 bash -c 'exec 3<>/dev/tcp/{target}; cat <&3' 2>&1; echo rc=$?",
        )
        assert "gateway-bot canary listener" not in result.stdout, f"{what}: {result.stdout}"
        assert "rc=0" not in result.stdout, f"{what}: {result.stdout}"
    assert v6.connections == 1, "the host saw no connection over IPv6"
    assert v4.connections == 0, "nor over IPv4"
    addresses = sandbox.exec(container["name"], "cat /proc/net/if_inet6; echo end").stdout
    assert addresses.strip() == "end", "the agent's namespace has no IPv6 address at all"
    chat.close_input()
    assert chat.wait() == 0
