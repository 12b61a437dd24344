"""`gateway-bot down` as an operator uses it: a daemon ran, answered, and stopped, leaving its
conversation's container and its egress proxy running (as `run` does, for the next start);
`down` stops them, `down --remove` removes them and the conversation's network. Another
deployment on the same podman (its own labelled container, proxy and network) is never
touched, and `down` refuses while a daemon serves the state directory."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import gateway_env
from tests.support.sandbox_fixtures import (
    SESSION_PODMAN,
    SandboxSetup,
    current_image,
    per_run,
    podman,
    podman_run_flags,
)


def down(config: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway_bot", "down", "--config", str(config), *more],
        capture_output=True,
        text=True,
        env=gateway_env(),
        timeout=300,
        check=False,
    )


def states(deployment: str) -> dict[str, str]:
    """Every container of ``deployment``, name -> state, as podman has them."""
    listed = podman(
        "ps", "-a", "--format", "json", "--filter", f"label=gateway-bot.deployment={deployment}"
    )
    return {entry["Names"][0]: entry["State"] for entry in json.loads(listed.stdout or "[]")}


def networks(deployment: str) -> list[str]:
    return podman(
        "network", "ls", "--format", "{{.Name}}",
        "--filter", f"label=gateway-bot.deployment={deployment}",
    ).stdout.split()  # fmt: skip


@pytest.fixture
def neighbour(sandbox_images: None) -> Iterator[str]:
    """Another deployment on the same podman: an agent container, a proxy and a network
    with its labels, running."""
    deployment = per_run("neighbour")
    SESSION_PODMAN.deployments.add(deployment)
    context = per_run("next-door")
    image = current_image("localhost/gateway-bot/agent")
    labels = ["--label", f"gateway-bot.deployment={deployment}"]
    podman(
        "network", "create", *labels, "--label", "gateway-bot.role=network", f"gwb-net-{context}"
    )
    for name, role in ((f"gwb-{context}", "agent"), (f"gwb-proxy-{deployment}", "proxy")):
        podman(
            "run", "-d", "--name", name, *podman_run_flags(), "--network", "none", *labels,
            "--label", f"gateway-bot.role={role}", "--label", f"gateway-bot.context={context}",
            "--entrypoint", "sleep", image, "infinity",
        )  # fmt: skip
    yield deployment
    listed = podman(
        "ps", "-aq", "--filter", f"label=gateway-bot.deployment={deployment}"
    ).stdout.split()
    if listed:
        podman("rm", "-f", "-t", "0", *listed, check=False)
    podman("network", "rm", "-f", *networks(deployment), check=False)


def test_down_stops_then_removes_one_deployment_and_leaves_the_other_alone(
    gateway: Any, sandbox: SandboxSetup, neighbour: str
) -> None:
    config = sandbox.config()
    daemon = gateway("run", "--config", str(config))
    daemon.send("hello before the end of the day")
    daemon.expect(r"^agent> Echo: .*hello before the end of the day", timeout=240)
    context_id, info = sandbox.only_container()
    refused = down(config)  # the daemon still runs: its tasks use those containers
    assert refused.returncode == 1
    assert "Stop it first" in refused.stderr
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr

    proxy = f"gwb-proxy-{sandbox.deployment}"
    assert states(sandbox.deployment) == {info["name"]: "running", proxy: "running"}, (
        "run leaves them running"
    )
    neighbours = states(neighbour)
    assert sorted(neighbours.values()) == ["running", "running"]

    stopped = down(config)
    assert stopped.returncode == 0, stopped.stderr
    assert f"agent container {info['name']}" in stopped.stdout
    assert f"egress proxy    {proxy}" in stopped.stdout
    assert states(sandbox.deployment) == {info["name"]: "exited", proxy: "exited"}
    assert states(neighbour) == neighbours, "another deployment's containers run on"

    removed = down(config, "--remove")
    assert removed.returncode == 0, removed.stderr
    assert f"gwb-net-{context_id}" in removed.stdout
    assert states(sandbox.deployment) == {}
    assert networks(sandbox.deployment) == []
    assert states(neighbour) == neighbours
    assert len(networks(neighbour)) == 1, "another deployment's network stays"
    assert "Nothing of deployment" in down(config).stdout
