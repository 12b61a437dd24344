"""The allowlist, as a repo writes it and as the proxy applies it (pure, no containers)."""

from __future__ import annotations

import pytest

from gateway_bot.agents.claude.backend import CLAUDE_CODE
from gateway_bot.agents.claude.runner import injected_credentials
from gateway_bot.config.yaml_tags import ConfigError
from gateway_bot.sandbox.egress import allowlist
from gateway_bot.sandbox.egress.rules import (
    EgressRule,
    HeaderInjection,
    decide,
    decide_address,
    decide_connect,
    decide_raw_stream,
)


def parse_allowlist(text: str | None, model_base_url: str | None) -> tuple[EgressRule, ...]:
    """A repo's allowlist as the daemon reads it for Claude Code with this base URL."""
    env = {"ANTHROPIC_BASE_URL": model_base_url} if model_base_url else {}
    return allowlist.parse_allowlist(text, CLAUDE_CODE.model_api_rules(env))


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


PUB_ONLY = "allow:\n  - host: files.test\n    paths: ['/pub/*']\n  - registry.test\n"


@pytest.mark.parametrize(
    ("path", "refusal"),
    [
        ("/pub/../etc/hostname", "dot segments"),
        ("/pub/%2e%2e/etc/hostname", "dot segments"),
        ("/pub/%2E%2e/etc/hostname", "dot segments"),
        ("/pub/.%2e/etc/hostname", "dot segments"),
        ("/pub/%252e%252e/etc/hostname", "dot segments"),  # a server that decodes twice
        ("/pub//../etc/hostname", "dot segments"),  # nginx merges the slashes first
        ("/pub/..;/etc/hostname", "dot segments"),  # Tomcat drops ;parameters
        ("/pub/x/../../etc/hostname", "dot segments"),
        ("/secret/../pub/x", "dot segments"),  # an object store takes the key as written
        ("/pub/./x", "dot segments"),
        ("/pub/..", "is not allowed"),
        ("/pub/..%2fetc/hostname", "an encoded"),
        ("/pub/..%2Fetc/hostname", "an encoded"),
        ("/pub/%2e%2e%2fetc%2fhostname", "an encoded"),
        ("/pub/..%252fetc/hostname", "an encoded"),
        ("/pub/..%5cetc/hostname", "an encoded"),
        ("/admin%3f/../pub/x", "an encoded"),  # decoded then parsed again: /admin
        ("/admin%23/../pub/x", "an encoded"),
        ("/pub/..\\etc\\hostname", "a backslash"),
        ("/pub/%00/x", "a control character"),
        ("pub/x", "does not start with /"),
    ],
)
def test_paths_cannot_climb_out_of_their_rule(path: str, refusal: str) -> None:
    rules = parse_allowlist(PUB_ONLY, None)
    verdict = decide(rules, "GET", "files.test", path)
    assert not verdict.allowed, path
    assert refusal in verdict.reason, verdict.reason


def test_paths_are_matched_as_the_server_reads_them() -> None:
    rules = parse_allowlist(PUB_ONLY, None)
    assert decide(rules, "GET", "files.test", "/pub/x").allowed
    assert decide(rules, "GET", "files.test", "/pub/x?q=../../etc").allowed  # the query
    assert decide(rules, "GET", "files.test", "/pub/a%20b").allowed
    assert decide(rules, "GET", "files.test", "/pub//x").allowed  # read as /pub/x
    refused = decide(rules, "GET", "files.test", "/x/../pub/y")
    assert not refused.allowed
    assert "dot segments" in refused.reason
    # Hosts without path rules never look at the path: npm's scoped names keep working.
    assert decide(rules, "GET", "registry.test", "/@types%2fnode").allowed
    assert decide(rules, "GET", "registry.test", "/a/../b").allowed


def test_a_credential_header_goes_to_its_own_origin_only() -> None:
    key = HeaderInjection("https", "api.anthropic.com", 443, "x-api-key", "sk-real")
    assert "sk-real" not in repr(key)
    assert key.applies("https", "api.anthropic.com", 443, "api.anthropic.com", None)
    assert key.applies(
        "https", "API.anthropic.com.", 443, "api.anthropic.com:443", "api.anthropic.com"
    )
    assert key.applies("https", "api.anthropic.com", 443, None, None)
    # Anything else: another host, port or scheme, or a Host / TLS name that fronts for
    # another site behind the same CDN.
    assert not key.applies("https", "evil.test", 443, "evil.test", "evil.test")
    assert not key.applies("https", "evil.test", 443, "api.anthropic.com", "api.anthropic.com")
    assert not key.applies("https", "api.anthropic.com", 8443, "api.anthropic.com:8443", None)
    assert not key.applies("http", "api.anthropic.com", 443, "api.anthropic.com:443", None)
    assert not key.applies("https", "api.anthropic.com", 443, "evil.test", None)
    assert not key.applies("https", "api.anthropic.com", 443, "api.anthropic.com:444", None)
    assert not key.applies("https", "api.anthropic.com", 443, "api.anthropic.com:x", None)
    assert not key.applies("https", "api.anthropic.com", 443, "api.anthropic.com", "evil.test")
    v6 = HeaderInjection("http", "fd00::1", 4000, "authorization", "Bearer t")
    assert v6.applies("http", "fd00::1", 4000, "[fd00::1]:4000", None)
    assert not v6.applies("http", "fd00::1", 4000, "[fd00::2]:4000", None)


def test_model_credentials_become_placeholders_with_an_injected_header() -> None:
    env = {
        "ANTHROPIC_API_KEY": "sk-ant-api03-real",
        "CLAUDE_CODE_OAUTH_TOKEN": "sk-ant-oat01-real",
        "ANTHROPIC_MODEL": "claude-x",
    }
    api_key, oauth = injected_credentials(env)
    assert (api_key.env_name, api_key.header, api_key.value) == (
        "ANTHROPIC_API_KEY",
        "x-api-key",
        "sk-ant-api03-real",
    )
    assert (oauth.header, oauth.value) == ("authorization", "Bearer sk-ant-oat01-real")
    for credential in (api_key, oauth):
        assert (credential.scheme, credential.host, credential.port) == (
            "https",
            "api.anthropic.com",
            443,
        )
        assert "real" not in credential.placeholder
        assert "real" not in repr(credential)
    custom = injected_credentials(
        {"ANTHROPIC_AUTH_TOKEN": "t", "ANTHROPIC_BASE_URL": "http://10.89.0.1:4000/v1"}
    )
    assert [(c.scheme, c.host, c.port, c.header, c.value) for c in custom] == [
        ("http", "10.89.0.1", 4000, "authorization", "Bearer t")
    ]
    assert injected_credentials({"ANTHROPIC_BASE_URL": "http://x"}) == ()


def test_non_public_addresses_need_a_rule_that_names_them() -> None:
    rules = parse_allowlist("allow:\n  - '*.example.test'\n  - 10.89.0.1\n", None)
    assert decide_address(rules, "api.example.test", "93.184.216.34").allowed
    for address in (
        "127.0.0.1",
        "169.254.169.254",
        "10.0.0.5",
        "192.168.1.1",
        "::1",
        "fe80::1%eth0",
        "::ffff:127.0.0.1",
        "100.64.0.1",
        "fd00::1",
        "0.0.0.0",
    ):
        verdict = decide_address(rules, "rebind.example.test", address)
        assert not verdict.allowed, address
        assert "a non-public address no rule names" in verdict.reason
    assert decide_address(rules, "10.89.0.1", "10.89.0.1").allowed


def test_the_model_rule_opens_only_the_model_apis_port() -> None:
    """A loopback model endpoint is reached through a relay on the host's side of the
    egress network: its rule must not open the host's other services on that address."""
    rules = parse_allowlist(
        "allow:\n  - host: git.test\n    ports: [443]\n", "http://10.89.0.1:8089"
    )
    assert decide(rules, "POST", "10.89.0.1", "/v1/messages", 8089).allowed
    assert not decide(rules, "GET", "10.89.0.1", "/", 5432).allowed
    assert not decide_connect(rules, "10.89.0.1", 22).allowed
    assert decide_connect(rules, "git.test", 443).allowed
    assert not decide_connect(rules, "git.test", 8443).allowed
    https = parse_allowlist(None, None)
    assert decide_connect(https, "api.anthropic.com", 443).allowed
    assert not decide_connect(https, "api.anthropic.com", 22).allowed
