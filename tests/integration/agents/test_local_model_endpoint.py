"""A model API on this host's loopback (a local gateway such as LiteLLM on 127.0.0.1:PORT)
works with the podman sandbox, reached only through the egress proxy.

Inside a container 127.0.0.1 is the container itself. The daemon relays that one port from
the egress network's gateway and gives the agent the relay's address; the relay takes
connections from the egress proxy only, so the agent gets there through its proxy, which
adds the key, exactly as for a remote model API. Here the fake model API sits on 127.0.0.1
and the config names it there, as a user's config would.
"""

from __future__ import annotations

import re
import secrets
import shlex
import socket
import subprocess
import sys

from tests.conftest import gateway_env
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.sandbox_fixtures import (
    SandboxSetup,
    current_image,
    http_via_proxy,
    podman,
    podman_run_flags,
)

PLACEHOLDER = "sk-ant-api03-gateway-bot-placeholder"

_PROBE = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10) as s:
        s.sendall(f"GET {sys.argv[3]} HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n".encode())
        print(s.recv(200).decode(errors="replace") or "closed without an answer")
except OSError as exc:
    print(f"refused: {exc}")
"""


def _from_a_neighbour(sandbox: SandboxSetup, host: str, port: int, path: str) -> str:
    """A request from another container on the egress network (the proxy's neighbour), as
    any container on podman's default network would be."""
    return podman(
        "run", "--rm", *podman_run_flags(), "--network", sandbox.egress.name,
        "--label", f"gateway-bot.deployment={sandbox.deployment}",
        "--label", "gateway-bot.role=test", "--entrypoint", "python3",
        current_image("localhost/gateway-bot/proxy"), "-c", _PROBE, host, str(port), path,
        check=False,
    ).stdout.strip()  # fmt: skip


def test_a_model_api_on_loopback_answers_through_a_relay_reached_only_via_the_proxy(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic
) -> None:
    real_key = f"sk-ant-api03-local-{secrets.token_hex(8)}"
    local = fake_api.base_url  # http://127.0.0.1:PORT
    assert local.startswith("http://127.0.0.1:")
    config = sandbox.config(agent_env={"ANTHROPIC_BASE_URL": local, "ANTHROPIC_API_KEY": real_key})

    check = subprocess.run(
        [sys.executable, "-m", "gateway_bot", "check", "--config", str(config)],
        capture_output=True,
        text=True,
        env=gateway_env(),
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    gateway_ip = re.escape(sandbox.egress.gateway)
    assert re.search(
        rf"^model API {re.escape(local)} reached by the sandbox through a relay at "
        rf"{gateway_ip}:\d+, via the egress proxy$",
        check.stdout,
        re.MULTILINE,
    ), check.stdout
    assert "warning" not in check.stdout, check.stdout

    chat = gateway("chat", "--config", str(config))
    fake_api.hold("hello local model")
    chat.send("hello local model")
    assert fake_api.wait_for_held(180), "the agent's request never reached the local API"
    _, info = sandbox.only_container()
    agent = info["name"]
    seen = sandbox.exec(agent, "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done").stdout
    relay_url = re.search(rf"^ANTHROPIC_BASE_URL=(http://{gateway_ip}:\d+)$", seen, re.MULTILINE)
    assert relay_url, "the agent was given the relay's address"
    relay_port = int(relay_url[1].rsplit(":", 1)[1])
    assert real_key not in seen, "the key stays with the proxy, as for a remote API"
    assert f"ANTHROPIC_API_KEY={PLACEHOLDER}" in seen
    fake_api.release()
    chat.expect(r"^agent> Echo: .*hello local model")
    model_calls = [h for path, h in fake_api.credentials_seen if path == "/v1/messages"]
    assert model_calls
    assert all(h.get("x-api-key") == real_key for h in model_calls), "the proxy added the key"

    # Through the proxy the relay answers (the fake's 404 for an unknown path) ...
    via_proxy = http_via_proxy(sandbox, agent, "GET", f"{relay_url[1]}/probe-via-proxy")
    assert via_proxy.startswith("HTTP/1.1 404"), via_proxy
    # ... but never to anyone else: the agent going around its proxy,
    request = r"printf 'GET /probe-around HTTP/1.0\r\n\r\n' >&3; cat <&3"
    around = f"exec 3<>/dev/tcp/{sandbox.egress.gateway}/{relay_port}; {request}"
    assert "HTTP/" not in sandbox.exec(agent, f"timeout 10 bash -c {shlex.quote(around)}").stdout
    # a neighbour of the proxy on the egress network (which reaches the test's own relay
    # on the same address, so the network lets it through),
    control = _from_a_neighbour(sandbox, sandbox.relay.host, sandbox.relay.port, "/control")
    assert control.startswith("HTTP/1.0 404"), control
    refused = _from_a_neighbour(sandbox, sandbox.egress.gateway, relay_port, "/probe-neighbour")
    assert "HTTP/" not in refused, refused
    # nor a process on the host itself.
    with socket.create_connection((sandbox.egress.gateway, relay_port), timeout=10) as probe:
        probe.sendall(b"GET /probe-host HTTP/1.0\r\nHost: x\r\n\r\n")
        try:
            answer = probe.recv(200)
        except ConnectionResetError:
            answer = b""
        assert answer == b"", "the relay answered a host process"
    paths = [path for path, _ in fake_api.credentials_seen]
    assert "/probe-via-proxy" in paths
    assert not {"/probe-around", "/probe-neighbour", "/probe-host"} & set(paths)
    chat.finish()
    assert "model relay: refused a connection from" in chat.stderr
