"""Egress allowlist rules and the decisions made with them: may this request go out, must it
wait for a person's approval first, and does it get a credential header on its way?

Standard library and yarl only, on purpose: the proxy image gets this package (``rules``,
``target``, ``git_push``) beside its mitmproxy addon, so the daemon (which validates a repo's
allowlist and reads held requests) and the proxy (which enforces it) read requests and decide
with the same code.
"""

from __future__ import annotations

import fnmatch
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .target import AmbiguousTarget, PathReading, RequestTarget, canonical_host, read_target

ALLOW = "allow"
ASK = "ask"


@dataclass(frozen=True)
class EgressRule:
    """Requests to hosts matching ``host`` (a glob: ``*.github.com``) are allowed, limited to
    ``paths`` (globs on the path without the query), ``methods`` and ``ports`` when those
    are given.

    An ``ask`` rule (``action``) opens nothing: a request the allow rules let out that also
    matches an ask rule is held by the proxy until the daemon says yes or no
    (``judge``). So adding ask rules only ever makes a list stricter."""

    host: str
    paths: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()
    action: str = ALLOW

    def matches_host(self, host: str, port: int | None = None) -> bool:
        """The host matches, and so does the port when the rule names ports (a rule for the
        host's loopback model relay must not open every service on that address)."""
        if self.ports and port is not None and port not in self.ports:
            return False
        return fnmatch.fnmatchcase(_normal_host(host), self.host.lower())

    @property
    def unrestricted(self) -> bool:
        return not self.paths and not self.methods

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "paths": list(self.paths),
            "methods": list(self.methods),
            "ports": list(self.ports),
            "action": self.action,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EgressRule:
        action = str(data.get("action", ALLOW))
        if action not in (ALLOW, ASK):
            raise ValueError(f"unknown rule action {action!r}")
        return cls(
            host=str(data["host"]),
            paths=tuple(str(p) for p in data.get("paths", ())),
            methods=tuple(str(m).upper() for m in data.get("methods", ())),
            ports=tuple(int(p) for p in data.get("ports", ())),
            action=action,
        )

    def describe(self) -> str:
        """One line for a card or a log: ``ask POST *:*/git-receive-pack``."""
        methods = ",".join(self.methods) or "any method"
        paths = ",".join(self.paths) or "any path"
        ports = ":" + ",".join(str(p) for p in self.ports) if self.ports else ""
        return f"{self.action} {methods} {self.host}{ports} {paths}"


GIT_PUSH_ASK = EgressRule(host="*", paths=("*/git-receive-pack",), methods=("POST",), action=ASK)
"""The default ask rule: every git push over HTTPS (smart HTTP posts the pack there)."""


def allow_rules(rules: Iterable[EgressRule]) -> list[EgressRule]:
    return [rule for rule in rules if rule.action == ALLOW]


REFUSE = "refuse"


@dataclass(frozen=True)
class Judgement:
    """What the proxy does with one request: ``action`` is ALLOW (it goes), ASK (held for a
    person, ``rule`` the ask rule) or REFUSE (403; 400 when ``ambiguous``: servers read the
    request in more than one way, or HTTP does not allow it)."""

    action: str
    reason: str
    rule: EgressRule | None = None
    ambiguous: bool = False

    @property
    def status(self) -> int:
        return 0 if self.action != REFUSE else 400 if self.ambiguous else 403


def judge(rules: Sequence[EgressRule], target: RequestTarget) -> Judgement:
    """The one verdict for a request read by ``target.read_target``: every reading of its
    path (how the servers we know route it) must get the same action, or it is refused as
    ambiguous. So a path rule admits a request only if it admits it however the server
    routes it, and an ask rule cannot be passed by a spelling some server routes to it."""
    host, port = target.host, target.port
    for_host = [rule for rule in allow_rules(rules) if rule.matches_host(host, port)]
    if not for_host:
        return Judgement(REFUSE, f"host {host} is not in the network allowlist")
    asks = [rule for rule in rules if rule.action == ASK and rule.matches_host(host, port)]
    outcomes = [
        (reading, _judge_reading(for_host, asks, target.method, host, reading))
        for reading in target.readings
    ]
    first_reading, first = outcomes[0]
    for reading, outcome in outcomes[1:]:
        if outcome.action != first.action:
            return Judgement(
                REFUSE,
                f"{target.method} {first_reading.path} is ambiguous: servers read it as "
                f"{first_reading.path} ({first.action}) or as {_shown(reading)} "
                f"({outcome.action})",
                ambiguous=True,
            )
    return first


def _shown(reading: PathReading) -> str:
    return f"{reading.path} in any case" if reading.any_case else reading.path


def _judge_reading(
    for_host: Sequence[EgressRule],
    asks: Sequence[EgressRule],
    method: str,
    host: str,
    reading: PathReading,
) -> Judgement:
    allowing = next((r for r in for_host if _admits(r, method, reading)), None)
    if allowing is None:
        return Judgement(
            REFUSE,
            f"{method} {reading.path} is not allowed for host {host} (path/method rules)",
        )
    ask = next((r for r in asks if _admits(r, method, reading)), None)
    if ask is not None:
        return Judgement(ASK, f"held for approval ({ask.describe()})", ask)
    return Judgement(ALLOW, f"allowed by rule for {allowing.host}", allowing)


def _admits(rule: EgressRule, method: str, reading: PathReading) -> bool:
    if rule.methods and method not in rule.methods:
        return False
    if not rule.paths:
        return True
    if reading.any_case:
        path = reading.path.lower()
        return any(fnmatch.fnmatchcase(path, pattern.lower()) for pattern in rule.paths)
    return any(fnmatch.fnmatchcase(reading.path, pattern) for pattern in rule.paths)


def _read(method: str, host: str, path: str, port: int | None) -> RequestTarget:
    return read_target(method, path, scheme="http", host=host, port=port or 80)


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str


def decide(
    rules: Sequence[EgressRule], method: str, host: str, path: str, port: int | None = None
) -> Verdict:
    """The allow rules' verdict for one request (ask rules are not looked at: ``judge``
    does both): allowed only if every reading of the path is."""
    try:
        target = _read(method, host, path, port)
    except AmbiguousTarget as exc:
        return Verdict(False, f"{method.upper()} refused: {exc}")
    judgement = judge(allow_rules(rules), target)
    return Verdict(judgement.action == ALLOW, judgement.reason)


def decide_address(rules: Sequence[EgressRule], host: str, address: str) -> Verdict:
    """May the proxy dial ``address``, which ``host`` resolved to? Public addresses yes (the
    name was already checked against the rules). Anything else (loopback, link-local such
    as cloud metadata, private networks, the host's side of the sandbox's own networks)
    only when a rule names that very address: a rule for a name, or a wildcard, must not
    reach the host or the operator's internal network through a DNS answer (rebinding)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return Verdict(False, f"{address} is not an address")
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_global and not ip.is_multicast:
        return Verdict(True, "a public address")
    if any(_normal_host(rule.host) == str(ip) for rule in allow_rules(rules)):
        return Verdict(True, f"{ip} is named by a rule")
    return Verdict(
        False,
        f"{_normal_host(host)} resolves to {ip}, a non-public address no rule names "
        "(allow the address itself to reach it)",
    )


def decide_connect(rules: Sequence[EgressRule], host: str, port: int | None = None) -> Verdict:
    """A tunnel (CONNECT) to ``host``: allowed when any rule names the host; the requests
    inside it are then checked one by one with ``judge``. A host in a form servers read
    differently (an IPv4 address written as one number) is refused."""
    try:
        host = canonical_host(host)
    except AmbiguousTarget as exc:
        return Verdict(False, str(exc))
    if any(rule.matches_host(host, port) for rule in allow_rules(rules)):
        return Verdict(True, "host is in the network allowlist")
    return Verdict(False, f"host {_normal_host(host)} is not in the network allowlist")


def decide_raw_stream(rules: Sequence[EgressRule], host: str, port: int | None = None) -> Verdict:
    """A tunnel that carries no HTTP (ssh, a database): only hosts with a rule free of path
    and method limits, since nothing in the stream can be checked against those, and none
    an ask rule names (a push over ssh would pass an ask for pushes over HTTP unseen)."""
    for rule in rules:
        if rule.action == ASK and rule.matches_host(host, port):
            return Verdict(
                False,
                f"non-HTTP traffic to {_normal_host(host)} is not allowed: requests to it may "
                f"need approval ({rule.describe()}), which a stream cannot be checked for",
            )
    if any(rule.matches_host(host, port) and rule.unrestricted for rule in allow_rules(rules)):
        return Verdict(True, "host is allowed without path or method limits")
    return Verdict(False, f"non-HTTP traffic to {_normal_host(host)} is not allowed")


@dataclass(frozen=True)
class HeaderInjection:
    """A header the proxy sets on requests to one origin only: how a credential the
    sandboxed process never holds (it has a placeholder) reaches the model API. Whatever
    the process sent in that header is replaced; requests anywhere else pass untouched."""

    scheme: str
    host: str
    port: int
    header: str
    value: str = field(repr=False)

    def applies(
        self, scheme: str, host: str, port: int, host_header: str | None, sni: str | None
    ) -> bool:
        """Does a request for ``scheme://host:port`` (where the proxy connects) with this
        Host header and, for HTTPS, this TLS server name go to this origin and nowhere
        else? Host header and server name must name it too: a CDN in front of the origin
        routes by them, so either one naming another site would carry the credential
        there (domain fronting)."""
        mine = _normal_host(self.host)
        if scheme.lower() != self.scheme.lower() or port != self.port:
            return False
        if _normal_host(host) != mine:
            return False
        if sni and _normal_host(sni) != mine:
            return False
        if host_header:
            header_host, header_port = _split_authority(host_header)
            if _normal_host(header_host) != mine:
                return False
            if header_port is not None and header_port != self.port:
                return False
        return True

    def to_json(self) -> dict[str, Any]:
        return {
            "scheme": self.scheme,
            "host": self.host,
            "port": self.port,
            "header": self.header,
            "value": self.value,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HeaderInjection:
        return cls(
            scheme=str(data["scheme"]),
            host=str(data["host"]),
            port=int(data["port"]),
            header=str(data["header"]),
            value=str(data["value"]),
        )


def _split_authority(authority: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]:port`` -> (host, port or None). An unparseable port
    is -1, which matches no origin."""
    text = authority.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else None
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, None
    if port_text is None:
        return host, None
    return host, int(port_text) if port_text.isdigit() else -1


def rules_to_json(rules: Iterable[EgressRule]) -> list[dict[str, Any]]:
    return [rule.to_json() for rule in rules]


def rules_from_json(data: Iterable[dict[str, Any]]) -> tuple[EgressRule, ...]:
    return tuple(EgressRule.from_json(item) for item in data)


def _normal_host(host: str) -> str:
    return host.strip().rstrip(".").lower().strip("[]")
