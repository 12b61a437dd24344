"""Three attacks on the egress proxy, reproduced against the real one, each written as the
attack (docs/decisions/0128-egress-one-reading-of-a-target.md, 0129-egress-decide-before-body.md).

The agent is root in its container and writes whatever bytes it likes to the proxy; here the
test writes them from the conversation's network. Behind the proxy: git's http-backend behind
lighttpd (a forge) and an aiohttp app (any other server).
"""

from __future__ import annotations

from gateway_bot.sandbox.egress.rules import GIT_PUSH_ASK, EgressRule
from tests.support.egress_rig import ProxyRig


def _head(method: str, url: str, *headers: str) -> bytes:
    host = url.split("/")[2]
    lines = [f"{method} {url} HTTP/1.1", f"Host: {host}", *headers, "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_a_push_spelt_with_a_fragment_does_not_move_the_ref_without_a_card(
    proxy_rig: ProxyRig,
) -> None:
    """``POST .../git-receive-pack#x``: the forge drops the fragment and runs receive-pack;
    the ask rule must hold it (or the proxy refuse it) all the same."""
    rig, forge = proxy_rig, f"{proxy_rig.upstreams.host}:{proxy_rig.upstreams.git_port}"
    rig.route([EgressRule(rig.upstreams.host), GIT_PUSH_ASK])
    rig.answer = "deny"
    body, commit = rig.push_body("pushed past the card")
    for spelling in ("#x", "#", "#/../x"):
        head = _head(
            "POST", f"http://{forge}/git/repo.git/git-receive-pack{spelling}",
            "Content-Type: application/x-git-receive-pack-request", f"Content-Length: {len(body)}",
        )  # fmt: skip
        reply = rig.send(head, body)
        assert rig.branch() is None, f"{spelling}: the push landed without a decision"
        assert reply.status == 400, (spelling, reply)
        assert b"fragment" in reply.body
    # Control: the plain spelling is held, and an approval lands it.
    rig.answer = "allow"
    plain = _head(
        "POST", f"http://{forge}/git/repo.git/git-receive-pack",
        "Content-Type: application/x-git-receive-pack-request", f"Content-Length: {len(body)}",
    )  # fmt: skip
    reply = rig.send(plain, body)
    assert reply.status == 200, reply
    assert rig.branch() == commit
    assert [held.path for held in rig.asked][-1] == "/git/repo.git/git-receive-pack"
    refused = [e for e in rig.network_log() if "fragment" in e.get("reason", "")]
    assert len(refused) == 3
    assert not any(e["allowed"] for e in refused)


def test_a_leading_wildcard_path_rule_admits_nothing_before_a_fragment(
    proxy_rig: ProxyRig,
) -> None:
    rig, app = proxy_rig, f"{proxy_rig.upstreams.host}:{proxy_rig.upstreams.app_port}"
    rig.route([EgressRule(rig.upstreams.host, paths=("*/info/refs", "*/git-upload-pack"))])
    before = len(rig.upstreams.seen)
    reply = rig.send(
        _head("POST", f"http://{app}/admin/delete-everything#/git-upload-pack", "Content-Length: 0")
    )
    assert reply.status == 400, reply
    assert not [s for s in rig.upstreams.seen[before:] if s["route"] == "admin"]
    # Control: the rule's own paths still go through, and reach what they name.
    fetch = rig.send(_head("POST", f"http://{app}/repo.git/git-upload-pack", "Content-Length: 0"))
    assert fetch.status == 200, fetch
    assert fetch.json["route"] == "fetch"


def test_a_huge_body_to_a_blocked_host_is_refused_before_it_is_read(proxy_rig: ProxyRig) -> None:
    """An empty allowlist, ``Content-Length: 734003200``, then zeros: the proxy answers 403
    at once and closes, never reading the body; it does not die, and the other
    conversation's requests go on."""
    rig, app = proxy_rig, f"{proxy_rig.upstreams.host}:{proxy_rig.upstreams.app_port}"
    rig.route([])
    rig.route([EgressRule(rig.upstreams.host)], conversation="b")
    started = rig.proxy_state()
    reply = rig.send(
        _head("POST", "http://blocked.example.test/upload", "Content-Length: 734003200"),
        body_chunks=700,
    )
    assert reply.status == 403, reply
    assert b"blocked.example.test is not in the network allowlist" in reply.body
    assert reply.closed_early, "the whole body was read before the answer"
    assert rig.proxy_state() == started, "the proxy restarted"
    other = rig.send(_head("GET", f"http://{app}/pub/x"), conversation="b")
    assert other.status == 200, other
    assert other.json["route"] == "pub"
