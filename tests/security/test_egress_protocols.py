"""The other ways out through the egress proxy, each against the allowlist and the ask rules:
HTTP/2 inside a TLS tunnel (curl, nghttp2) and in clear text (h2c), WebSocket upgrades,
CONNECT to a port the rule does not name, TLS whose server name is not the Host, and IP
literals in the forms resolvers read as addresses.

The servers behind the proxy speak plain HTTP, so a request let out inside a TLS tunnel ends
in the proxy's own 502 (its TLS to them fails): what is checked there is the proxy's verdict,
in its answer and its network log.
"""

from __future__ import annotations

import base64
import socket
import ssl
import subprocess
from pathlib import Path

import pytest

from gateway_bot.sandbox.egress.rules import GIT_PUSH_ASK, EgressRule
from tests.support.egress_rig import PROXY_PORT, ProxyRig, Reply, read_reply


def _curl(rig: ProxyRig, *args: str) -> tuple[str, str]:
    """curl through conversation a's proxy: (HTTP version, status)."""
    proxy = f"http://{rig.conversations['a'].proxy}:{PROXY_PORT}"
    done = subprocess.run(
        ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
         "--max-time", "20", "-x", proxy, "--cacert", str(rig.proxy.ca_certificate), *args],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    version, _, status = done.stdout.strip().partition(" ")
    return version, status


def _tunnel(rig: ProxyRig, target: str) -> socket.socket:
    """A CONNECT tunnel from conversation a; fails the test unless the proxy opens it."""
    client = socket.create_connection((rig.conversations["a"].proxy, PROXY_PORT), 20)
    client.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    answer = client.recv(4096)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    return client


def _connect_status(rig: ProxyRig, target: str) -> int:
    head = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode()
    return rig.send(head).status


@pytest.fixture
def rig(proxy_rig: ProxyRig) -> ProxyRig:
    up = proxy_rig.upstreams
    proxy_rig.route(
        [EgressRule(up.host, paths=("/pub/*", "/ws", "*/git-receive-pack"),
                    ports=(up.app_port,)), GIT_PUSH_ASK]
    )  # fmt: skip
    proxy_rig.answer = "deny"
    return proxy_rig


def _logged(rig: ProxyRig, path: str) -> list[bool]:
    return [e["allowed"] for e in rig.network_log() if e["url"].endswith(path)]


def test_http2_in_a_tls_tunnel_is_judged_request_by_request(rig: ProxyRig) -> None:
    base = f"https://{rig.upstreams.host}:{rig.upstreams.app_port}"
    asked = len(rig.asked)
    assert _curl(rig, "--http2", f"{base}/admin/h2") == ("2", "403")
    assert _curl(rig, "--http2", "-X", "POST", "-d", "x", f"{base}/r.git/git-receive-pack") == (
        "2",
        "403",
    )
    assert len(rig.asked) == asked + 1, "the push over HTTP/2 was held and asked about"
    version, _ = _curl(rig, "--http2", f"{base}/pub/h2")
    assert version == "2"
    assert _logged(rig, "/pub/h2") == [True]
    assert _logged(rig, "/admin/h2") == [False]


def test_http2_in_clear_text_is_judged_too(rig: ProxyRig) -> None:
    """h2c through a forward proxy: curl's upgrade offer and its prior knowledge both go to
    the proxy as HTTP/1.1 requests, judged as any; an HTTP/2 preface sent to the proxy
    itself is not let through to anything."""
    base = f"http://{rig.upstreams.host}:{rig.upstreams.app_port}"
    for flag in ("--http2", "--http2-prior-knowledge"):
        assert _curl(rig, flag, f"{base}/admin/h2c")[1] == "403", flag
        assert _curl(rig, flag, f"{base}/pub/h2c")[1] == "200", flag
    assert not [e for e in rig.upstreams.seen if e["path"] == "/admin/h2c"]
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    seen = len(rig.upstreams.seen)
    with socket.create_connection((rig.conversations["a"].proxy, PROXY_PORT), 20) as client:
        client.sendall(preface)
        client.settimeout(5)
        try:
            answer = client.recv(4096)
        except OSError:
            answer = b""
    assert not answer.startswith(b"HTTP/1.1 2"), answer
    assert len(rig.upstreams.seen) == seen


def test_a_websocket_upgrade_is_judged_as_its_request(rig: ProxyRig) -> None:
    up = rig.upstreams
    key = base64.b64encode(b"0123456789abcdef").decode()

    def upgrade(path: str) -> tuple[socket.socket, Reply]:
        client = socket.create_connection((rig.conversations["a"].proxy, PROXY_PORT), 20)
        client.sendall(
            f"GET http://{up.host}:{up.app_port}{path} HTTP/1.1\r\n"
            f"Host: {up.host}:{up.app_port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        return client, read_reply(client, False)

    client, reply = upgrade("/ws")
    with client:
        assert reply.status == 101, reply
        client.sendall(
            b"\x81\x85abcd" + bytes(b ^ m for b, m in zip(b"hello", b"abcd" * 2, strict=False))
        )
        assert b"echo hello" in client.recv(4096)
    client, reply = upgrade("/admin/ws")
    client.close()
    assert reply.status == 403, reply


def test_connect_to_a_port_the_rule_does_not_name_is_refused(rig: ProxyRig) -> None:
    up = rig.upstreams
    assert _connect_status(rig, f"{up.host}:{up.git_port}") == 403
    assert _connect_status(rig, f"{up.host}:22") == 403
    _tunnel(rig, f"{up.host}:{up.app_port}").close()  # control: the named port opens


def test_ip_literals_in_every_form_are_read_one_way(rig: ProxyRig) -> None:
    up = rig.upstreams
    octets = [int(o) for o in up.host.split(".")]
    number = int.from_bytes(bytes(octets), "big")
    for form in (
        str(number),
        ".".join(f"0{o:o}" for o in octets),
        ".".join(hex(o) for o in octets),
        f"{octets[0]}.{number & 0xFFFFFF}",
    ):
        assert _connect_status(rig, f"{form}:{up.app_port}") in (400, 403), form
        url = f"http://{form}:{up.app_port}/pub/x"
        assert rig.send(f"GET {url} HTTP/1.1\r\nConnection: close\r\n\r\n".encode()).status in (
            400,
            403,
        ), form
    mapped = f"[::ffff:{up.host}]:{up.app_port}"
    _tunnel(rig, mapped).close()  # the same address, so the same rule
    head = f"GET http://{mapped}/admin/x HTTP/1.1\r\nHost: {mapped}\r\nConnection: close\r\n\r\n"
    reply = rig.send(head.encode())
    assert reply.status == 403, reply
    assert _connect_status(rig, f"[::1]:{up.app_port}") == 403


def test_tls_whose_server_name_is_not_the_host_is_refused(rig: ProxyRig, tmp_path: Path) -> None:
    up = rig.upstreams
    authority = f"{up.host}:{up.app_port}"
    context = ssl.create_default_context(cafile=str(rig.proxy.ca_certificate))
    context.check_hostname = False
    for server_name in ("evil.example", None):
        tunnel = _tunnel(rig, authority)
        with context.wrap_socket(tunnel, server_hostname=server_name) as client:
            client.sendall(
                f"GET /pub/sni HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n".encode()
            )
            reply = read_reply(client, False)  # type: ignore[arg-type]
        if server_name:
            assert reply.status == 400, reply
            assert "TLS server name" in reply.headers.get("x-gateway-bot-blocked", "")
        else:  # no server name (an address): judged by the Host, let out (then 502)
            assert "x-gateway-bot-blocked" not in reply.headers, reply
    assert _logged(rig, "/pub/sni") == [False, True]
