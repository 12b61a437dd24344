"""Egress allowlist rules and the one decision made with them: may this request go out?

Standard library only, on purpose: the proxy image gets a copy of this file next to its
mitmproxy addon, so the daemon (which validates a repo's allowlist) and the proxy (which
enforces it) decide with the same code.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EgressRule:
    """Requests to hosts matching ``host`` (a glob: ``*.github.com``) are allowed, limited to
    ``paths`` (globs on the path without the query) and ``methods`` when those are given."""

    host: str
    paths: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()

    def matches_host(self, host: str) -> bool:
        return fnmatch.fnmatchcase(_normal_host(host), self.host.lower())

    @property
    def unrestricted(self) -> bool:
        return not self.paths and not self.methods

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "paths": list(self.paths), "methods": list(self.methods)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EgressRule:
        return cls(
            host=str(data["host"]),
            paths=tuple(str(p) for p in data.get("paths", ())),
            methods=tuple(str(m).upper() for m in data.get("methods", ())),
        )


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str


def decide(rules: Sequence[EgressRule], method: str, host: str, path: str) -> Verdict:
    """The verdict for one HTTP request (``path`` may carry a query; it is ignored)."""
    for_host = [rule for rule in rules if rule.matches_host(host)]
    if not for_host:
        return Verdict(False, f"host {_normal_host(host)} is not in the network allowlist")
    bare_path = path.split("?", 1)[0] or "/"
    method = method.upper()
    for rule in for_host:
        if rule.methods and method not in rule.methods:
            continue
        if rule.paths and not any(fnmatch.fnmatchcase(bare_path, p) for p in rule.paths):
            continue
        return Verdict(True, f"allowed by rule for {rule.host}")
    return Verdict(
        False,
        f"{method} {bare_path} is not allowed for host {_normal_host(host)} (path/method rules)",
    )


def decide_connect(rules: Sequence[EgressRule], host: str) -> Verdict:
    """A tunnel (CONNECT) to ``host``: allowed when any rule names the host; the requests
    inside it are then checked one by one with ``decide``."""
    if any(rule.matches_host(host) for rule in rules):
        return Verdict(True, "host is in the network allowlist")
    return Verdict(False, f"host {_normal_host(host)} is not in the network allowlist")


def decide_raw_stream(rules: Sequence[EgressRule], host: str) -> Verdict:
    """A tunnel that carries no HTTP (ssh, a database): only hosts with a rule free of path
    and method limits, since nothing in the stream can be checked against those."""
    if any(rule.matches_host(host) and rule.unrestricted for rule in rules):
        return Verdict(True, "host is allowed without path or method limits")
    return Verdict(False, f"non-HTTP traffic to {_normal_host(host)} is not allowed")


def rules_to_json(rules: Iterable[EgressRule]) -> list[dict[str, Any]]:
    return [rule.to_json() for rule in rules]


def rules_from_json(data: Iterable[dict[str, Any]]) -> tuple[EgressRule, ...]:
    return tuple(EgressRule.from_json(item) for item in data)


def _normal_host(host: str) -> str:
    return host.strip().rstrip(".").lower().strip("[]")
