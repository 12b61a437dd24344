"""Fixtures for the Podman sandbox tests: real podman, real images, a real egress proxy.

The fake model API must be reachable from the egress proxy's container and from nowhere
else, and no test traffic may leave loopback or the podman networks the tests create. So
the session creates its own egress network (``gwb-test-egress-*``) for the proxies, and a
small TCP relay listens on that network's gateway address (on the host's side of its
bridge) and forwards to the fake API on 127.0.0.1. The agent containers sit on their own
internal networks and reach the relay only through the proxy, as they would the real API.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gateway_bot.config.sandbox import PodmanSettings
from gateway_bot.sandbox.podman.service import PodmanService
from tests.conftest import GIT_IDENTITY, gateway_env, write_config
from tests.support.fake_anthropic import FakeAnthropic

PODMAN = "podman"
IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)
"""Bind the relay before the network's bridge exists (it appears with the first container)."""


def podman(
    *args: str, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PODMAN, *args], capture_output=True, text=True, check=check, timeout=timeout
    )


@dataclass(frozen=True)
class EgressNetwork:
    name: str
    gateway: str


class Relay:
    """host:port on the egress network's gateway -> 127.0.0.1:target_port (the fake API)."""

    def __init__(self, host: str, target_port: int) -> None:
        self._target = target_port
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
        self._server.bind((host, 0))
        self._server.listen(64)
        self.host, self.port = host, self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self._target))
            except OSError:
                client.close()
                continue
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(source, sink), daemon=True).start()

    def close(self) -> None:
        self._server.close()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    finally:
        source.close()


@dataclass
class SessionPodman:
    """What this test session made in podman, for the session-end check (tests/conftest.py):
    sessions run side by side on one host, and each answers only for its own."""

    socket: Path | None = None
    deployments: set[str] = field(default_factory=set)
    networks: set[str] = field(default_factory=set)


SESSION_PODMAN = SessionPodman()


@pytest.fixture(scope="session")
def podman_socket(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's own podman service socket. The daemons under test start the service
    there when nothing answers and leave it running (as `run` does); the session stops it
    at its end, and never touches a service another session or the user relies on."""
    SESSION_PODMAN.socket = tmp_path_factory.getbasetemp() / "podman.sock"
    return SESSION_PODMAN.socket


@pytest.fixture(scope="session")
def sandbox_images(podman_socket: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Build (or find up to date) the base, agent and proxy images, as the set-up step does."""
    directory = tmp_path_factory.mktemp("images")
    config = directory / "gateway-bot.yaml"
    config.write_text(
        json.dumps(
            {
                "state_dir": str(directory / "state"),
                "repo": {"url": str(directory)},
                "sandbox": {"kind": "podman", "podman": {"socket": str(podman_socket)}},
            }
        )
    )
    for step in (["bootstrap"], ["build"]):
        result = subprocess.run(
            [sys.executable, "-m", "gateway_bot", "image", *step, "--config", str(config)],
            capture_output=True,
            text=True,
            env=gateway_env(),
            timeout=1500,
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.fixture(scope="session")
def egress_network(sandbox_images: None) -> Iterator[EgressNetwork]:
    name = f"gwb-test-egress-{os.getpid()}"
    SESSION_PODMAN.networks.add(name)
    podman("network", "create", "--disable-dns", name)
    info = json.loads(podman("network", "inspect", name).stdout)[0]
    yield EgressNetwork(name, info["subnets"][0]["gateway"])
    podman("network", "rm", "--force", name, check=False)


@pytest.fixture(scope="session")
def model_relay(egress_network: EgressNetwork, fake_api_server: FakeAnthropic) -> Iterator[Relay]:
    port = int(fake_api_server.base_url.rsplit(":", 1)[1])
    relay = Relay(egress_network.gateway, port)
    yield relay
    relay.close()


@dataclass
class SandboxSetup:
    """What a sandbox test needs: a config writer and podman views of its deployment."""

    deployment: str
    egress: EgressNetwork
    relay: Relay
    tmp_path: Path
    repo: Path
    api: FakeAnthropic
    podman_socket: Path

    def config(self, agent_env: dict[str, str] | None = None, **sandbox: Any) -> Path:
        """A daemon config for this deployment; ``agent_env`` adds to (or replaces) the
        agent's model variables (a test's own API key)."""
        settings = {
            "kind": "podman",
            "deployment": self.deployment,
            "egress_network": self.egress.name,
            "podman": {"socket": str(self.podman_socket)},
            **sandbox,
        }
        env = {
            "ANTHROPIC_BASE_URL": self.relay.url,
            "ANTHROPIC_API_KEY": "test-key",
            "CLAUDE_CODE_MAX_RETRIES": "0",
            **(agent_env or {}),
        }
        return write_config(
            self.tmp_path,
            self.repo,
            self.api,
            sandbox=settings,
            agent={"timeout_seconds": 120, "env": env},
        )

    def containers(self) -> dict[str, dict[str, Any]]:
        """This deployment's agent containers by context id: id, state, start time, ip."""
        listed = podman(
            "ps", "-a", "--format", "json",
            "--filter", f"label=gateway-bot.deployment={self.deployment}",
            "--filter", "label=gateway-bot.role=agent",
        )  # fmt: skip
        found = {}
        for entry in json.loads(listed.stdout or "[]"):
            inspected = podman("inspect", entry["Id"], check=False)
            if inspected.returncode != 0:
                continue  # removed between the listing and now
            info = json.loads(inspected.stdout)[0]
            networks = info["NetworkSettings"]["Networks"]
            found[info["Config"]["Labels"]["gateway-bot.context"]] = {
                "id": info["Id"],
                "name": info["Name"],
                "running": info["State"]["Running"],
                "started": info["State"]["StartedAt"],
                "image": info["ImageName"],
                "ip": next(iter(networks.values()))["IPAddress"] if networks else None,
            }
        return found

    def only_container(self) -> tuple[str, dict[str, Any]]:
        found = self.containers()
        assert len(found) == 1, found
        return next(iter(found.items()))

    def exec(self, container: str, script: str) -> subprocess.CompletedProcess[str]:
        return podman("exec", container, "bash", "-c", script, check=False, timeout=60)

    def conversation_dir(self, context_id: str) -> Path:
        return self.tmp_path / "state" / "conversations" / context_id

    def remove_all(self) -> None:
        for kind in ("agent", "proxy", "test"):
            listed = podman(
                "ps", "-aq",
                "--filter", f"label=gateway-bot.deployment={self.deployment}",
                "--filter", f"label=gateway-bot.role={kind}",
            ).stdout.split()  # fmt: skip
            if listed:
                podman("rm", "-f", "-t", "0", *listed, check=False)
        networks = podman(
            "network", "ls", "-q", "--filter", f"label=gateway-bot.deployment={self.deployment}"
        ).stdout.split()
        if networks:
            podman("network", "rm", "-f", *networks, check=False)


@pytest.fixture
def sandbox(
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    egress_network: EgressNetwork,
    model_relay: Relay,
    podman_socket: Path,
) -> Iterator[SandboxSetup]:
    deployment = f"test-{secrets.token_hex(4)}"
    SESSION_PODMAN.deployments.add(deployment)
    setup = SandboxSetup(
        deployment, egress_network, model_relay, tmp_path, target_repo, fake_api, podman_socket
    )
    yield setup
    setup.remove_all()


def http_via_proxy(
    sandbox: SandboxSetup,
    container: str,
    method: str,
    url: str,
    headers: dict[str, str] | None = None,
) -> str:
    """One HTTP/1.1 request through the egress proxy, byte for byte as given (no client
    between: dot segments, ``%2e`` and backslashes go out as written), from ``container``.
    ``headers`` may replace Host. Returns the raw response, status line first."""
    lines = {"Host": url.split("/")[2], **(headers or {}), "Connection": "close"}
    head = f"{method} {url} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in lines.items())
    encoded = base64.b64encode(f"{head}Content-Length: 0\r\n\r\n".encode()).decode()
    script = (
        f"exec 3<>/dev/tcp/proxy/8080 && printf %s {encoded} | base64 -d >&3 && timeout 20 cat <&3"
    )
    return sandbox.exec(container, script).stdout


def wait_until(predicate: Any, what: str, timeout: float = 90) -> None:
    """Poll ``predicate`` until it holds; fail naming ``what`` (a deadline, not a speed check)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.2)


def podman_run_flags() -> list[str]:
    """The runtime and ulimit flags the sandbox itself uses on this host (its defaults)."""
    return PodmanService(PodmanSettings(), Path("/nonexistent")).cli_limit_flags()


def current_image(repository: str) -> str:
    """The newest local tag of ``repository`` (e.g. localhost/gateway-bot/proxy)."""
    listed = podman(
        "images", "--sort", "created", "--format", "{{.Repository}}:{{.Tag}}",
        "--filter", f"reference={repository}",
    ).stdout.split()  # fmt: skip
    assert listed, f"no {repository} image"
    return listed[0]


def commit_file(repo: Path, name: str, text: str) -> None:
    """A new commit on the target repo's default branch (what the daemon reads at task start)."""
    target = repo / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    subprocess.run(["git", "-C", str(repo), "add", name], check=True)
    subprocess.run(
        ["git", "-C", str(repo), *GIT_IDENTITY, "commit", "-q", "-m", f"change {name}"], check=True
    )
