"""The repo's network allowlist: ``.gateway/network-allowlist.yaml`` on its default branch.

Read at each task start from the mirror (like the repo config), so the agent cannot widen its
own network access by editing the file in its workspace. The caller's required rules (the
agent backend's model API, given as plain data: the sandbox knows no agent) always come
first: without them the agent cannot run, so a repo cannot forget them. Format::

    allow:
      - github.com                      # a bare host: any method, any path
      - host: "*.githubusercontent.com"
        methods: [GET, HEAD]
      - host: pypi.org
        paths: ["/simple/*", "/pypi/*"]
      - host: git.example.org
        ports: [443]                    # only these ports (default: any)
    ask:                                # held by the proxy until someone approves
      - host: api.example.org
        methods: [POST, PUT, DELETE]
        paths: ["/v1/deploy*"]

``ask`` rules only add approvals on top of the server's (``sandbox.egress_approvals``, whose
default asks before every git push over HTTPS); a repo cannot remove one, and an ask rule
opens nothing the allow rules do not (``rules.judge``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gateway_bot.config.validation import describe_validation_errors
from gateway_bot.config.yaml_tags import ConfigError, load_repo_yaml
from gateway_bot.sandbox.egress.rules import ASK, EgressRule

ALLOWLIST_PATH = ".gateway/network-allowlist.yaml"

_HOST_PATTERN = re.compile(r"^[A-Za-z0-9*?.\-\[\]:]+$")
_METHOD = re.compile(r"^[A-Za-z]+$")


class _RuleModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = Field(min_length=1)
    paths: list[str] = Field(default_factory=list)
    methods: list[str] = Field(default_factory=list)
    ports: list[int] = Field(default_factory=list)

    @field_validator("ports")
    @classmethod
    def _are_ports(cls, values: list[int]) -> list[int]:
        for value in values:
            if not 0 < value < 65536:
                raise ValueError(f"{value} is not a port")
        return values

    @field_validator("host")
    @classmethod
    def _is_host(cls, value: str) -> str:
        if not _HOST_PATTERN.match(value) or "/" in value:
            raise ValueError(f"{value!r} is not a host name or pattern (no scheme, no path)")
        return value

    @field_validator("paths")
    @classmethod
    def _absolute(cls, values: list[str]) -> list[str]:
        for value in values:
            if not value.startswith(("/", "*")):
                raise ValueError(f"path {value!r} must start with / (a glob such as /api/*)")
        return values

    @field_validator("methods")
    @classmethod
    def _are_methods(cls, values: list[str]) -> list[str]:
        for value in values:
            if not _METHOD.match(value):
                raise ValueError(f"{value!r} is not an HTTP method")
        return [value.upper() for value in values]


class _AllowlistModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    allow: list[_RuleModel] = Field(default_factory=list)
    ask: list[_RuleModel] = Field(default_factory=list)


def _bare_hosts(items: Any) -> Any:
    """A list's bare host names as ``{"host": name}``; anything else as it is (the model
    then says what is wrong with it)."""
    if not items:
        return []
    if not isinstance(items, list):
        return items
    return [{"host": item} if isinstance(item, str) else item for item in items]


def rule_for_url(url: str) -> EgressRule:
    """The rule that opens exactly ``url``'s host and port (80 for http, else 443): what an
    agent backend's model API needs."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise ValueError(f"{url!r} names no host")
    try:
        port = parts.port or (80 if parts.scheme == "http" else 443)
    except ValueError as exc:
        raise ValueError(f"{url!r} has no valid port") from exc
    return EgressRule(host=parts.hostname, ports=(port,))


def parse_allowlist(text: str | None, required: Iterable[EgressRule]) -> tuple[EgressRule, ...]:
    """The rules for one task: ``required`` (the model API), then the repo's rules (none
    without the file), its ask rules last. Raises ConfigError listing every problem of the
    file."""
    rules = list(required)
    if text is None:
        return tuple(rules)
    data: Any = load_repo_yaml(text, ALLOWLIST_PATH)
    if data is None:
        return tuple(rules)
    if not isinstance(data, dict):
        raise ConfigError(ALLOWLIST_PATH, ["the top level must be a mapping with an 'allow' list"])
    data = {
        **{key: value for key, value in data.items() if key not in ("allow", "ask")},
        **{key: _bare_hosts(data.get(key)) for key in ("allow", "ask")},
    }
    try:
        parsed = _AllowlistModel.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(ALLOWLIST_PATH, describe_validation_errors(exc)) from exc
    for item in parsed.allow:
        rules.append(
            EgressRule(item.host, tuple(item.paths), tuple(item.methods), tuple(item.ports))
        )
    for item in parsed.ask:
        rules.append(
            EgressRule(
                item.host, tuple(item.paths), tuple(item.methods), tuple(item.ports), action=ASK
            )
        )
    return tuple(rules)
