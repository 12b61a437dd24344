"""The differential test of the egress proxy's reading of request targets
(docs/decisions/0128-egress-one-reading-of-a-target.md).

Each odd request (``egress_targets/targets.txt``, written out with what the proxy must do, and
a generated cross of base paths with spellings) goes byte for byte through the real proxy to
a real server that routes it: aiohttp, and git's http-backend behind lighttpd. Held requests
are approved, so they reach the server too. Then the proxy's verdict (allow, ask, refuse) is
held against the server's reading:

- allowed: the rules, applied to the path as the server read it, allow it; for git, the
  server ran no receive-pack (a push that reached receive-pack without a decision fails,
  however spelt);
- held: the server read a push (or routed nothing);
- refused with 403: sent straight to the server, it routes to nothing the rules allow;
- refused with 400 (read differently by different servers, or not HTTP): nothing reached the
  server, and the network log says why.

Every disagreement is listed; the test wants none.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from gateway_bot.sandbox.egress.rules import ALLOW, ASK, GIT_PUSH_ASK, REFUSE, EgressRule, judge
from gateway_bot.sandbox.egress.target import AmbiguousTarget, read_target
from tests.support.egress_rig import ProxyRig, Reply, send_raw

CORPUS = Path(__file__).parent / "egress_targets" / "targets.txt"
_PUSH_RESULT = "application/x-git-receive-pack-result"
_GIT_READS = (
    "application/x-git-upload-pack-result",
    "application/x-git-upload-pack-advertisement",
    "application/x-git-receive-pack-advertisement",
)


@dataclass(frozen=True)
class Case:
    server: str
    expect: str
    method: str
    target: str
    version: str
    headers: str
    note: str

    def head(self, authority: str, host: str, port: int, *, direct: bool = False) -> bytes:
        address = ipaddress.IPv4Address(host)
        octets = host.split(".")
        values = {
            "A": authority,
            "H": host,
            "P": str(port),
            "D": str(int(address)),
            "O": ".".join(f"0{int(o):o}" for o in octets),
            "X": ".".join(hex(int(o)) for o in octets),
            "S": f"{octets[0]}.{int(address) & 0xFFFFFF}",
        }
        target = _fill(self.target, values)
        headers = [_fill(h, values) for h in self.headers.split(" || ") if h]
        if direct:  # what the proxy would have sent: origin-form
            target = target.removeprefix(f"http://{authority}") or "/"
        if self.headers == "-":
            headers = []
        elif not any(h.lower().startswith("host") for h in headers):
            headers.insert(0, f"Host: {authority}")
        if any(h.lower().startswith("transfer-encoding") for h in headers):
            body = "0\r\n\r\n"
        elif any(h.lower().startswith("content-length") for h in headers):
            body = ""
        else:
            headers.append("Content-Length: 0")
            body = ""
        line = f"{self.method} {target} {self.version}".rstrip()
        lines = [line, *headers, "Connection: close"]
        return ("\r\n".join(lines) + "\r\n\r\n" + body).encode("latin-1")


def _fill(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def _corpus() -> list[Case]:
    cases = []
    for line in CORPUS.read_text(encoding="latin-1").splitlines():
        if not line or line.startswith("#"):
            continue
        fields = line.encode("latin-1").decode("unicode_escape").split("\t")
        cases.append(Case(*fields))
    return cases


_SPELLINGS = {
    "as is": lambda p: p,
    "fragment": lambda p: p + "#x",
    "fragment path": lambda p: p + "#/pub/x",
    "trailing slash": lambda p: p + "/",
    "parameter": lambda p: p + ";x",
    "encoded nul": lambda p: p + "%00",
    "encoded space": lambda p: p + "%20",
    "upper last": lambda p: p.rsplit("/", 1)[0] + "/" + p.rsplit("/", 1)[1].upper(),
    "double slash": lambda p: p.rsplit("/", 1)[0] + "//" + p.rsplit("/", 1)[1],
    "leading double slash": lambda p: "/" + p,
    "dot": lambda p: p.rsplit("/", 1)[0] + "/./" + p.rsplit("/", 1)[1],
    "dot dot": lambda p: p.rsplit("/", 1)[0] + "/z/../" + p.rsplit("/", 1)[1],
    "encoded letter": lambda p: p[:-1] + f"%{ord(p[-1]):02x}",
    "encoded slash": lambda p: p.rsplit("/", 1)[0] + "%2F" + p.rsplit("/", 1)[1],
    "query": lambda p: p + "?a=b",
    "empty query": lambda p: p + "?",
    "encoded question": lambda p: p + "%3Fx",
    "encoded hash": lambda p: p + "%23x",
    "backslash": lambda p: p.rsplit("/", 1)[0] + "\\" + p.rsplit("/", 1)[1],
    "tab": lambda p: p + "\tx",
}
_BASES = {
    "app": ["/pub/x", "/admin/x", "/repo.git/git-receive-pack", "/repo.git/git-upload-pack"],
    "git": ["/git/repo.git/git-receive-pack", "/git/repo.git/git-upload-pack"],
}


def _generated() -> list[Case]:
    cases = []
    for server, bases in _BASES.items():
        for base in bases:
            method = "POST" if "pack" in base else "GET"
            for name, spell in _SPELLINGS.items():
                target = "http://{A}" + spell(base)
                cases.append(Case(server, "any", method, target, "HTTP/1.1", "", name))
    return cases


def _rules(rig: ProxyRig) -> dict[str, list[EgressRule]]:
    host, up = rig.upstreams.host, rig.upstreams
    return {
        "app": [
            EgressRule(host, paths=("/pub/*", "/repo.git/*"), ports=(up.app_port,)),
            GIT_PUSH_ASK,
        ],
        "git": [EgressRule(host, ports=(up.git_port,)), GIT_PUSH_ASK],
    }


def _server_reading(rules: list[EgressRule], seen: dict[str, str], host: str, port: int) -> str:
    """What the rules say of the path as the server read it (decoded by the server; quoted
    again so that it reads one way)."""
    path = quote(seen["path"], safe="/;=@:!$&'()*+,~")
    try:
        target = read_target(seen["method"], path, scheme="http", host=host, port=port)
    except AmbiguousTarget:
        return REFUSE
    return judge(rules, target).action


def _proxy_verdict(reply: Reply, asked: bool) -> str:
    upstream = "route" in reply.body.decode("latin-1") or "lighttpd" in reply.headers.get(
        "server", ""
    )
    if reply.status == 0 or "x-gateway-bot-blocked" in reply.headers or not upstream:
        return REFUSE
    return ASK if asked else ALLOW


def _disagreement(rig: ProxyRig, rules: dict[str, list[EgressRule]], case: Case) -> str | None:
    up = rig.upstreams
    port = up.app_port if case.server == "app" else up.git_port
    authority = f"{up.host}:{port}"
    asked = len(rig.asked)
    reply = rig.send(case.head(authority, up.host, port))
    verdict = _proxy_verdict(reply, len(rig.asked) > asked)
    why = reply.headers.get("x-gateway-bot-blocked", reply.body[:80].decode("latin-1"))
    said = f"{case.note}: {case.method} {case.target!r} -> {verdict} ({reply.status} {why})"
    if case.expect != "any" and verdict != case.expect:
        return f"{said}, expected {case.expect}"
    if verdict == REFUSE:
        if reply.status == 403:
            direct = send_raw(up.host, port, case.head(authority, up.host, port, direct=True))
            routed = _routed(rules[case.server], case, direct, up.host, port)
            if routed == ALLOW:
                return f"{said}: refused, but the server routes it to an allowed resource"
        return None
    routed = _routed(rules[case.server], case, reply, up.host, port)
    if routed is not None and routed != verdict:
        return f"{said}: the server read it as {routed}"
    return None


def _routed(rules: list[EgressRule], case: Case, reply: Reply, host: str, port: int) -> str | None:
    """The verdict for what the server routed (None: it routed nothing)."""
    if case.server == "git":
        kind = reply.headers.get("content-type", "")
        if kind == _PUSH_RESULT:
            return ASK
        return ALLOW if kind in _GIT_READS else None
    try:
        seen = reply.json
    except ValueError:
        return None
    if seen.get("route") == "push":
        return ASK
    return _server_reading(rules, seen, host, port)


@pytest.mark.parametrize("server", ["app", "git"])
def test_the_proxy_and_the_server_agree_on_every_odd_request(
    proxy_rig: ProxyRig, server: str
) -> None:
    rig = proxy_rig
    rules = _rules(rig)
    rig.route(rules[server])
    rig.answer = "allow"
    cases = [c for c in [*_corpus(), *_generated()] if c.server == server]
    disagreements = [d for case in cases if (d := _disagreement(rig, rules, case))]
    assert not disagreements, "\n".join(disagreements)
    # Every request the proxy refused as ambiguous is in the network log with its reason.
    entries = rig.network_log()
    assert any("fragment" in e["reason"] and not e["allowed"] for e in entries)


def test_the_corpus_is_large_enough() -> None:
    assert len(_corpus()) + len(_generated()) >= 150
