"""Egress allowlist rules and the decisions made with them: may this request go out, must it
wait for a person's approval first, and does it get a credential header on its way?

Standard library only, on purpose: the proxy image gets a copy of this file next to its
mitmproxy addon, so the daemon (which validates a repo's allowlist) and the proxy (which
enforces it) decide with the same code.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

ALLOW = "allow"
ASK = "ask"


@dataclass(frozen=True)
class EgressRule:
    """Requests to hosts matching ``host`` (a glob: ``*.github.com``) are allowed, limited to
    ``paths`` (globs on the path without the query), ``methods`` and ``ports`` when those
    are given.

    An ``ask`` rule (``action``) opens nothing: a request the allow rules let out that also
    matches an ask rule is held by the proxy until the daemon says yes or no
    (``ask_rule_for``). So adding ask rules only ever makes a list stricter."""

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


def ask_rule_for(
    rules: Sequence[EgressRule],
    method: str,
    hosts: Iterable[str],
    path: str,
    port: int | None = None,
) -> EgressRule | None:
    """The first ask rule matching a request (None: it needs no approval). ``hosts`` are every
    name the request goes by (where the proxy connects, its Host header): any one matching
    asks. The path is matched as written, as the most eager server reads it, and as the most
    forgiving one routes it (``_lenient_reading``); a path that cannot be read one way only
    matches every ask rule of its host and method, so no spelling of
    ``/repo.git/git-receive-pack`` slips past an ask."""
    bare_path = path.split("?", 1)[0] or "/"
    try:
        readings = {bare_path, normal_path(bare_path)}
        unsafe = False
    except UnsafePath:
        readings, unsafe = {bare_path}, True
    method = method.upper()
    names = [host for host in hosts if host]
    for rule in rules:
        if rule.action != ASK:
            continue
        if rule.methods and method not in rule.methods:
            continue
        if not any(rule.matches_host(host, port) for host in names):
            continue
        if not rule.paths or unsafe:
            return rule
        lenient = {_lenient_reading(r) for r in readings}
        if any(fnmatch.fnmatchcase(r, p) for r in readings for p in rule.paths) or any(
            fnmatch.fnmatchcase(r, p.lower()) for r in lenient for p in rule.paths
        ):
            return rule
    return None


def _lenient_reading(path: str) -> str:
    """How the most forgiving server routes ``path``: ``;parameters`` dropped from every
    segment (Java servlet containers: Gerrit, Bitbucket Server), trailing slashes ignored,
    and letters in either case (IIS: Azure DevOps Server). Only for ask rules: an ask that
    matches more readings holds more, never less."""
    segments = [segment.split(";", 1)[0] for segment in path.split("/")]
    return ("/".join(segments).rstrip("/") or "/").lower()


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str


class UnsafePath(ValueError):
    """A path that servers may read in more than one way: no path rule can vouch for it."""


def decide(
    rules: Sequence[EgressRule], method: str, host: str, path: str, port: int | None = None
) -> Verdict:
    """The verdict for one HTTP request (``path`` may carry a query; it is ignored).

    Path rules match the path as the most eager server would read it (``normal_path``), so
    ``/pub/../etc`` is ``/etc``, not something under ``/pub/``. A path that cannot be read
    one way only (an encoded slash, a backslash) never satisfies a path rule; rules without
    paths do not look at the path, so there it still goes (npm's ``@scope%2fname``). Ask
    rules are not looked at here (``ask_rule_for``)."""
    for_host = [rule for rule in allow_rules(rules) if rule.matches_host(host, port)]
    if not for_host:
        return Verdict(False, f"host {_normal_host(host)} is not in the network allowlist")
    bare_path = path.split("?", 1)[0] or "/"
    method = method.upper()
    unsafe: UnsafePath | None = None
    normal: str | None = None
    for rule in for_host:
        if rule.methods and method not in rule.methods:
            continue
        if rule.paths:
            if normal is None and unsafe is None:
                try:
                    normal = normal_path(bare_path)
                except UnsafePath as exc:
                    unsafe = exc
            if normal is None or not any(fnmatch.fnmatchcase(normal, p) for p in rule.paths):
                continue
        return Verdict(True, f"allowed by rule for {rule.host}")
    if unsafe is not None:
        return Verdict(False, f"{method} {bare_path} refused: {unsafe}")
    shown = bare_path if normal in (None, bare_path) else f"{bare_path} (read as {normal})"
    return Verdict(
        False,
        f"{method} {shown} is not allowed for host {_normal_host(host)} (path/method rules)",
    )


_ENCODED_SEPARATOR = re.compile(r"%(2f|5c|3f|23)", re.IGNORECASE)
"""Encoded ``/``, ``\\``, ``?`` and ``#``: a server that decodes and then parses again
reads them as structure (``/admin%3f/../pub/x`` is ``/admin`` there)."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MAX_DECODINGS = 4


def normal_path(path: str) -> str:
    """``path`` percent-decoded and with its dot segments resolved, the way the most eager
    server would read it: decoded until nothing changes (a server or framework behind
    another may decode twice), empty segments merged (nginx's ``merge_slashes``), and
    ``..;x`` taken as ``..`` (Tomcat drops ``;`` parameters). Each of those readings only
    moves a path up, never down, so a path that matches a rule after this is under that
    rule however the server reads it. Raises UnsafePath for encoded slashes (``%2f``,
    ``%5c``), backslashes and control characters, which servers split or keep as they like.
    """
    current = path
    for _ in range(_MAX_DECODINGS):
        if _ENCODED_SEPARATOR.search(current):
            raise UnsafePath("an encoded / \\ ? or # (%2f %5c %3f %23) in the path is refused")
        decoded = unquote(current, errors="surrogateescape")
        if decoded == current:
            break
        current = decoded
    else:
        raise UnsafePath(f"the path is still percent-encoded after {_MAX_DECODINGS} decodings")
    if "\\" in current:
        raise UnsafePath("a backslash in the path is refused")
    if _CONTROL.search(current):
        raise UnsafePath("a control character in the path is refused")
    if current == "*":
        return current  # OPTIONS *: no segments, and no path rule is just "*" by accident
    if not current.startswith("/"):
        raise UnsafePath("a path that does not start with / is refused")
    kept: list[str] = []
    segments = current.split("/")[1:]
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        name = segment.split(";", 1)[0]
        if name in (".", "..") and not last:
            # Servers that do not normalise (object stores: S3 keys) take the path as
            # written, so /secret/../pub/x is a key under secret/ there: no dot segments.
            raise UnsafePath("dot segments (. or ..) in the path are refused")
        if name == "..":
            if kept:
                kept.pop()
            if last:
                kept.append("")
        elif name == ".":
            if last:
                kept.append("")
        elif segment or last:
            kept.append(segment)
    return "/" + "/".join(kept)


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
    inside it are then checked one by one with ``decide``."""
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
