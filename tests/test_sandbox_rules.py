"""The allowlist, as a repo writes it and as the proxy applies it (pure, no containers)."""

from __future__ import annotations

import pytest

from gateway_bot.config.yaml_tags import ConfigError
from gateway_bot.sandbox.egress.allowlist import parse_allowlist
from gateway_bot.sandbox.egress.rules import decide, decide_connect, decide_raw_stream


def test_without_a_file_only_the_model_api_host_is_allowed() -> None:
    rules = parse_allowlist(None, None)
    assert decide(rules, "POST", "api.anthropic.com", "/v1/messages").allowed
    assert not decide(rules, "GET", "example.com", "/").allowed
    custom = parse_allowlist(None, "http://10.89.7.1:4000")
    assert decide(custom, "POST", "10.89.7.1", "/v1/messages?beta=true").allowed
    assert not decide(custom, "POST", "api.anthropic.com", "/v1/messages").allowed


def test_host_patterns_paths_and_methods() -> None:
    text = """
allow:
  - github.com
  - host: "*.githubusercontent.com"
    methods: [get, HEAD]
  - host: pypi.org
    paths: ["/simple/*", "/pypi/*"]
"""
    rules = parse_allowlist(text, None)
    assert decide(rules, "PUT", "GitHub.com.", "/anything").allowed
    assert decide(rules, "GET", "raw.githubusercontent.com", "/x").allowed
    refused = decide(rules, "POST", "raw.githubusercontent.com", "/x")
    assert not refused.allowed
    assert "POST /x is not allowed" in refused.reason
    assert decide(rules, "GET", "pypi.org", "/simple/requests/?q=1").allowed
    assert not decide(rules, "GET", "pypi.org", "/admin").allowed
    assert not decide(rules, "GET", "evil.com", "/").allowed
    assert "not in the network allowlist" in decide(rules, "GET", "evil.com", "/").reason
    assert decide_connect(rules, "pypi.org").allowed
    assert not decide_connect(rules, "evil.com").allowed
    assert decide_raw_stream(rules, "github.com").allowed
    assert not decide_raw_stream(rules, "pypi.org").allowed, "path rules cannot be checked"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("allow:\n  - host: https://github.com/x\n", "allow.0.host"),
        ("allow:\n  - host: a.com\n    paths: [simple]\n", "must start with /"),
        ("allow:\n  - host: a.com\n    methods: ['G T']\n", "is not an HTTP method"),
        ("allow:\n  - host: a.com\n    port: 22\n", "unknown key"),
        ("- a.com\n", "top level must be a mapping"),
    ],
)
def test_mistakes_are_reported_with_their_place(text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_allowlist(text, None)
    assert raised.value.source == ".gateway/network-allowlist.yaml"
    assert any(problem in line for line in raised.value.problems), raised.value.problems
