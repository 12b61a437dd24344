"""From inside a conversation's container: only the allowlist gets out, through the proxy.

Probes are plain bash (``/dev/tcp``) run with ``podman exec`` in the agent's container, so
they see exactly the network the agent sees. Every address probed belongs to a podman
network these tests made (or to the container's own): nothing leaves this machine.
"""

from __future__ import annotations

import json
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


def proxy_request(sandbox: SandboxSetup, container: str, method: str, url: str) -> str:
    """One HTTP/1.1 request through the proxy, as any program in the container would make
    it; returns the raw response (status line first)."""
    host = url.split("/")[2]
    request = f"{method} {url} HTTP/1.1\\r\\nHost: {host}\\r\\nConnection: close\\r\\n"
    script = (
        "exec 3<>/dev/tcp/proxy/8080 && "
        f"printf '{request}Content-Length: 0\\r\\n\\r\\n' >&3 && timeout 20 cat <&3"
    )
    return sandbox.exec(container, script).stdout


def tcp_connects(sandbox: SandboxSetup, container: str, host: str, port: int) -> bool:
    script = f"timeout 5 bash -c 'exec 3<>/dev/tcp/{host}/{port}'"
    return sandbox.exec(container, script).returncode == 0


@pytest.fixture
def web_server(sandbox: SandboxSetup) -> Iterator[str]:
    """A plain HTTP server on the egress network (the proxy's side): a host that a repo's
    allowlist can open with path and method rules. Returns its address."""
    name = f"gwb-test-web-{sandbox.deployment}"
    podman(
        "run", "-d", "--name", name, *podman_run_flags(), "--network", sandbox.egress.name,
        "--label", f"gateway-bot.deployment={sandbox.deployment}",
        "--label", "gateway-bot.role=test", "--entrypoint", "python3",
        current_image("localhost/gateway-bot/proxy"), "-m", "http.server", "8000",
    )  # fmt: skip
    info = json.loads(podman("inspect", name).stdout)[0]
    yield next(iter(info["NetworkSettings"]["Networks"].values()))["IPAddress"]
    podman("rm", "-f", "-t", "0", name, check=False)


def test_only_allowlisted_requests_leave_and_everything_is_logged(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic, web_server: str
) -> None:
    allowlist = f"allow:\n  - host: '{web_server}'\n    paths: ['/pub/*']\n    methods: [GET]\n"
    commit_file(sandbox.repo, ".gateway/network-allowlist.yaml", allowlist)
    chat = gateway("chat", "--config", str(sandbox.config()))
    chat.send("hello from behind the proxy")
    chat.expect(r"^agent> Echo: .*hello from behind the proxy")
    context_id, info = sandbox.only_container()
    agent = info["name"]
    relay = sandbox.relay

    # The model API host is always allowed: the fake answers (its own 404, not the proxy's).
    answered = proxy_request(sandbox, agent, "GET", f"{relay.url}/nothing-here")
    assert answered.startswith("HTTP/1.1 404"), answered
    # The repo's rule opens GET /pub/* on the web server, and nothing else there.
    served = proxy_request(sandbox, agent, "GET", f"http://{web_server}:8000/pub/x")
    assert served.startswith("HTTP/1.0 404 File not found"), served  # Python's http.server
    wrong_path = proxy_request(sandbox, agent, "GET", f"http://{web_server}:8000/private")
    assert wrong_path.startswith("HTTP/1.1 403")
    assert "path/method rules" in wrong_path
    wrong_method = proxy_request(sandbox, agent, "POST", f"http://{web_server}:8000/pub/x")
    assert wrong_method.startswith("HTTP/1.1 403")
    assert "POST /pub/x is not allowed" in wrong_method
    # Any other host: 403 with the reason, over plain HTTP and as an HTTPS tunnel.
    blocked = proxy_request(sandbox, agent, "GET", "http://blocked.example.test/")
    assert blocked.startswith("HTTP/1.1 403")
    assert "host blocked.example.test is not in the network allowlist" in blocked
    tunnel = sandbox.exec(
        agent,
        "exec 3<>/dev/tcp/proxy/8080 && printf 'CONNECT blocked.example.test:443 HTTP/1.1\\r\\n"
        "Host: blocked.example.test:443\\r\\n\\r\\n' >&3 && timeout 20 head -1 <&3",
    ).stdout
    assert tunnel.startswith("HTTP/1.1 403"), tunnel

    # No way around the proxy: no direct connection anywhere, not even to allowed hosts.
    proxy_info = json.loads(podman("inspect", f"gwb-proxy-{sandbox.deployment}").stdout)[0]
    proxy_outside = proxy_info["NetworkSettings"]["Networks"][sandbox.egress.name]["IPAddress"]
    for host, port in (
        (relay.host, relay.port),
        (web_server, 8000),
        (proxy_outside, 8080),
        (sandbox.egress.gateway, 22),
    ):
        assert not tcp_connects(sandbox, agent, host, port), f"direct {host}:{port} connected"
    assert tcp_connects(sandbox, agent, "proxy", 8080), "the proxy itself is reachable"
    # And no DNS: names outside /etc/hosts do not resolve.
    assert sandbox.exec(agent, "getent hosts blocked.example.test").returncode != 0
    assert sandbox.exec(agent, "getent hosts proxy").returncode == 0

    log_lines = (sandbox.conversation_dir(context_id) / "network.log").read_text().splitlines()
    entries = [json.loads(line) for line in log_lines]
    assert any(e["allowed"] and e["url"].startswith(relay.url) for e in entries)
    assert any(e["allowed"] and "/pub/x" in e["url"] for e in entries)
    blocked_urls = [e["url"] for e in entries if not e["allowed"]]
    assert "http://blocked.example.test/" in blocked_urls
    assert "blocked.example.test:443" in blocked_urls
    assert any(e["method"] == "POST" and not e["allowed"] for e in entries)


def test_the_proxy_ca_is_trusted_inside_the_container(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(sandbox.config()))
    chat.send("hello")
    chat.expect(r"^agent> Echo: .*hello")
    _, info = sandbox.only_container()
    ca = sandbox.tmp_path / "state" / "sandbox" / "egress" / "ca" / "mitmproxy-ca-cert.pem"
    bundle = sandbox.exec(info["name"], "cat /etc/ssl/certs/ca-certificates.crt").stdout
    assert ca.read_text().strip() in bundle, "the proxy's CA is in the system trust store"
    env = sandbox.exec(info["name"], "echo $NODE_EXTRA_CA_CERTS; echo $HTTPS_PROXY").stdout
    assert env.split() == [
        "/usr/local/share/ca-certificates/gateway-bot-proxy.crt",
        "http://proxy:8080",
    ]


def test_two_conversations_cannot_reach_each_other(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(sandbox.config()))
    chat.send("first conversation")
    chat.expect(r"^agent> Echo: .*first conversation")
    chat.send("/new")
    chat.expect(r"Started a new conversation")
    chat.send("second conversation")
    chat.expect(r"^agent> Echo: .*second conversation")
    containers = sandbox.containers()
    assert len(containers) == 2
    first, second = sorted(containers.values(), key=lambda c: c["started"])
    listener = (
        "perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalPort => 7000, "
        'Listen => 5, ReuseAddr => 1) or die; while ($c = $s->accept) { print $c "hello\\n"; '
        "close $c }'"
    )
    podman("exec", "-d", second["name"], "bash", "-c", listener)
    reach = f"timeout 5 bash -c 'exec 3<>/dev/tcp/{second['ip']}/7000 && cat <&3'"
    for _ in range(50):  # the listener needs a moment to bind; the control says when
        if sandbox.exec(second["name"], reach).stdout.strip() == "hello":
            break
    assert sandbox.exec(second["name"], reach).stdout.strip() == "hello", "control: it listens"

    assert sandbox.exec(first["name"], reach).returncode != 0, "no route between conversations"
    through_proxy = proxy_request(sandbox, first["name"], "GET", f"http://{second['ip']}:7000/")
    assert through_proxy.startswith("HTTP/1.1 403"), "nor through the proxy"
    second_proxy_side = second["ip"].rsplit(".", 1)[0] + ".2"
    assert not tcp_connects(sandbox, first["name"], second_proxy_side, 8080)


def test_path_rules_cannot_be_escaped_with_dot_segments(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic, web_server: str
) -> None:
    """The attack: the repo opens only GET /pub/* on a file server; the agent asks for
    /pub/../etc/hostname (and its encoded forms), which the server resolves to a file
    outside /pub/. Python's http.server serves / here, so a pass would be a 200."""
    allowlist = f"allow:\n  - host: '{web_server}'\n    paths: ['/pub/*']\n    methods: [GET]\n"
    commit_file(sandbox.repo, ".gateway/network-allowlist.yaml", allowlist)
    chat = gateway("chat", "--config", str(sandbox.config()))
    chat.send("hello from behind the proxy")
    chat.expect(r"^agent> Echo: .*hello from behind the proxy")
    _, info = sandbox.only_container()
    agent, base = info["name"], f"http://{web_server}:8000"
    leaked = http_via_proxy(sandbox, agent, "GET", f"{base}/etc/hostname")
    assert leaked.startswith("HTTP/1.1 403"), "control: the file itself is outside the rule"

    dots = "dot segments (. or ..) in the path are refused"
    encoded = "an encoded / \\ ? or # (%2f %5c %3f %23) in the path is refused"
    for path, reason in (
        ("/pub/../etc/hostname", dots),
        ("/pub/%2e%2e/etc/hostname", dots),
        ("/pub/%2E%2E/etc/hostname", dots),
        ("/pub/%252e%252e/etc/hostname", dots),
        ("/pub//../etc/hostname", dots),
        ("/pub/..%2fetc/hostname", encoded),
        ("/pub/%2e%2e%2Fetc%2fhostname", encoded),
        ("/pub/..%5cetc%5chostname", encoded),
        ("/admin%3f/../pub/x", encoded),
        ("/pub/..\\etc\\hostname", "a backslash in the path is refused"),
    ):
        answer = http_via_proxy(sandbox, agent, "GET", f"{base}{path}")
        assert answer.startswith("HTTP/1.1 403"), (path, answer)
        assert reason in answer, (path, answer)
    # A plain path under /pub/ reaches the server (its own 404).
    inside = http_via_proxy(sandbox, agent, "GET", f"{base}/pub/x")
    assert inside.startswith("HTTP/1.0 404 File not found"), inside


def test_a_name_that_resolves_to_the_proxys_own_side_is_not_dialled(
    gateway, sandbox: SandboxSetup, web_server: str
) -> None:
    """The attack: the repo allows a name (here ``localhost``; a wildcard or a rebinding
    DNS name does the same) that resolves to a loopback, link-local or private address,
    where the host's and the operator's services listen. Only an address a rule names
    literally may be dialled; the file server's own address is named, so it still works."""
    allowlist = f"allow:\n  - localhost\n  - host: '{web_server}'\n"
    commit_file(sandbox.repo, ".gateway/network-allowlist.yaml", allowlist)
    chat = gateway("chat", "--config", str(sandbox.config()))
    chat.send("hello from behind the proxy")
    chat.expect(r"^agent> Echo: .*hello from behind the proxy")
    _, info = sandbox.only_container()
    refused = http_via_proxy(sandbox, info["name"], "GET", "http://localhost:8080/")
    assert refused.startswith("HTTP/1.1 502"), refused
    assert "resolves to 127.0.0.1, a non-public address no rule names" in refused
    named = http_via_proxy(sandbox, info["name"], "GET", f"http://{web_server}:8000/pub/x")
    assert named.startswith("HTTP/1.0 404"), "a literally named private address still works"
    chat.close_input()
    assert chat.wait() == 0
