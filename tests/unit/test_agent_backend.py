"""The agent backend seam: `agent.backend` picks a descriptor, and everything backend-specific
(environment, credentials, the model API the allowlist opens, the image's files) comes from
it. Claude Code is the default; Gemini CLI is offered beside it when enabled."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway_bot.agents.claude.backend import CLAUDE_CODE
from gateway_bot.agents.registry import backend_named
from gateway_bot.config.server import build_server_config, load_server_config
from gateway_bot.runtime.agent_setup import (
    agent_environment,
    agent_image_files,
    check_agent_setup,
    describe_backends,
)
from gateway_bot.sandbox.egress.allowlist import parse_allowlist
from gateway_bot.sandbox.egress.rules import decide, decide_connect
from tests.integration.cli.test_config import run_cli


def test_claude_code_is_the_default_backend_and_the_older_spelling_still_names_it() -> None:
    default = build_server_config({"repo": {"url": "/tmp/x"}}, "test")
    assert backend_named(default.agent.backend) is CLAUDE_CODE
    older = build_server_config(
        {"repo": {"url": "/tmp/x"}, "agent": {"backend": "claude_code"}}, "t"
    )
    assert backend_named(older.agent.backend) is CLAUDE_CODE
    with pytest.raises(ValueError, match="no agent backend named 'aider' \\(known: claude-code, "):
        backend_named("aider")


def test_an_unknown_backend_in_the_config_is_reported_with_its_key_path(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("repo: {url: /tmp/x}\nagent: {backend: aider}\n")
    result = run_cli("check", "--config", str(config))
    assert result.returncode == 2
    assert "agent.backend" in result.stderr
    assert "claude-code" in result.stderr


def test_the_agent_inherits_only_the_backends_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "from-env")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "never-the-agents")
    config = build_server_config(
        {"repo": {"url": "/tmp/x"}, "agent": {"env": {"EXTRA": "1"}}}, "test"
    )
    assert agent_environment(config, None) == {"ANTHROPIC_API_KEY": "from-env", "EXTRA": "1"}


def test_missing_credentials_and_a_base_url_without_a_host_are_set_up_problems() -> None:
    config = build_server_config({"repo": {"url": "/tmp/x"}}, "test")
    missing = check_agent_setup(config, {})
    assert missing is not None
    assert missing.message.startswith("No model credentials: set ANTHROPIC_API_KEY")
    no_host = check_agent_setup(config, {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "api"})
    assert no_host is not None
    assert no_host.message == "ANTHROPIC_BASE_URL: 'api' names no host: give the model API's URL."
    assert check_agent_setup(config, {"ANTHROPIC_API_KEY": "k"}) is None


def test_every_tasks_allowlist_opens_the_backends_model_api_and_only_its_port() -> None:
    public = parse_allowlist(None, CLAUDE_CODE.model_api_rules({}))
    assert decide(public, "POST", "api.anthropic.com", "/v1/messages").allowed
    assert not decide_connect(public, "api.anthropic.com", 22).allowed
    gateway = CLAUDE_CODE.model_api_rules({"ANTHROPIC_BASE_URL": "http://10.89.0.1:4000/v1"})
    repo_rules = parse_allowlist("allow:\n  - pypi.org\n", gateway)
    assert decide(repo_rules, "POST", "10.89.0.1", "/v1/messages", 4000).allowed
    assert decide(repo_rules, "GET", "pypi.org", "/simple/").allowed
    assert not decide(repo_rules, "POST", "api.anthropic.com", "/v1/messages").allowed


def test_the_image_gets_the_same_agent_binary_the_host_runs() -> None:
    config = build_server_config({"repo": {"url": "/tmp/x"}}, "test")
    files = agent_image_files(config)
    assert set(files) == {"claude"}, "the name the default and repo Containerfiles copy"
    assert files["claude"].is_file()
    assert files["claude"] == files["claude"].resolve(), "the binary, not the npm shim link"


def test_gemini_is_in_the_image_and_the_environment_only_when_enabled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "anthropic-key")
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-key")
    plain = build_server_config({"repo": {"url": "/tmp/x"}}, "test")
    assert agent_environment(plain, None) == {"ANTHROPIC_API_KEY": "anthropic-key"}
    assert not any(name.startswith("gemini") for name in agent_image_files(plain))
    both = build_server_config(
        {"repo": {"url": "/tmp/x"}, "agent": {"enabled": ["gemini-cli"]}}, "test"
    )
    env = agent_environment(both, None)
    assert env == {"ANTHROPIC_API_KEY": "anthropic-key", "GEMINI_API_KEY": "gemini-key"}
    files = agent_image_files(both)
    assert {"claude", "gemini", "node", "gemini-cli/bundle/gemini.js"} <= set(files)
    assert files["node"].is_file()


def test_each_cli_gets_only_its_own_vendors_key() -> None:
    from gateway_bot.agents.enabled import AgentSet, EnabledAgent
    from gateway_bot.agents.gemini.runner import GEMINI_CLI

    agents = AgentSet(
        "claude-code",
        {
            "claude-code": EnabledAgent(CLAUDE_CODE, CLAUDE_CODE.make_runner(["claude"]), None),
            "gemini-cli": EnabledAgent(GEMINI_CLI, GEMINI_CLI.make_runner(["gemini"]), None),
        },
    )
    env = {"ANTHROPIC_API_KEY": "a", "GEMINI_API_KEY": "g", "EXTRA": "1"}
    assert agents.env_for("gemini-cli", env) == {"GEMINI_API_KEY": "g", "EXTRA": "1"}
    assert agents.env_for("claude-code", env) == {"ANTHROPIC_API_KEY": "a", "EXTRA": "1"}


def test_geminis_key_stays_with_the_proxy_for_its_model_api_only() -> None:
    from gateway_bot.agents.gemini.runner import GEMINI_CLI

    rules = parse_allowlist(None, GEMINI_CLI.model_api_rules({}))
    path = "/v1beta/models/gemini-2.5-pro:streamGenerateContent"
    assert decide(rules, "POST", "generativelanguage.googleapis.com", path).allowed
    assert not decide(rules, "POST", "api.anthropic.com", "/v1/messages").allowed
    (credential,) = GEMINI_CLI.injected_credentials(
        {"GEMINI_API_KEY": "real", "GOOGLE_GEMINI_BASE_URL": "http://10.89.0.1:4000"}
    )
    assert (credential.host, credential.port, credential.header) == (
        "10.89.0.1",
        4000,
        "x-goog-api-key",
    )
    assert credential.value == "real"
    assert credential.placeholder != "real"
    problem = check_agent_setup(
        build_server_config(
            {"repo": {"url": "/tmp/x"}, "agent": {"enabled": ["gemini-cli"]}}, "test"
        ),
        {"ANTHROPIC_API_KEY": "k"},
    )
    assert problem is not None
    assert problem.message.startswith("No model credentials for Gemini")


def test_codex_goes_into_the_image_as_its_native_binary_when_enabled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The npm ``codex`` is a node shim; the image gets the static binary it starts."""
    monkeypatch.setenv("OPENAI_API_KEY", "openai-key")
    config = build_server_config({"repo": {"url": "/tmp/x"}, "agent": {"backend": "codex"}}, "test")
    assert agent_environment(config, None) == {"OPENAI_API_KEY": "openai-key"}
    files = agent_image_files(config)
    assert set(files) == {"codex"}
    assert files["codex"].is_file()
    assert files["codex"].read_bytes()[:4] == b"\x7fELF"
    assert check_agent_setup(config, {"OPENAI_API_KEY": "k"}) is None


def test_check_names_each_enabled_cli_and_says_what_it_cannot_do(tmp_path: Path) -> None:
    config = tmp_path / "gateway-bot.yaml"
    config.write_text(
        "repo: {url: /tmp/x}\n"
        "sandbox: {kind: none}\n"
        "agent:\n"
        "  enabled: [gemini-cli, codex]\n"
        "  env: {ANTHROPIC_API_KEY: a, GEMINI_API_KEY: g, OPENAI_API_KEY: o}\n"
    )
    result = run_cli("check", "--config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("agent gemini-cli: /") for line in lines), lines
    assert any(line.startswith("agent codex: /") for line in lines), lines
    assert "note: gemini-cli cannot: report cost (it reports tokens only); keep a warm " in (
        result.stdout
    )
    codex = next(line for line in lines if line.startswith("note: codex cannot: "))
    assert "leave out request_user_input" in codex
    assert not any(line.startswith("note: claude-code") for line in lines)
    assert "warning" not in result.stdout


def test_check_says_per_cli_what_action_approvals_can_ask(tmp_path: Path) -> None:
    """The lines ``gateway-bot check`` prints (``describe_backends``), without running it."""
    config = tmp_path / "gateway-bot.yaml"
    config.write_text(
        "repo: {url: /tmp/x}\n"
        "sandbox: {kind: none}\n"
        "agent:\n"
        "  enabled: [gemini-cli, codex]\n"
        "  approvals: {}\n"
        "  env: {ANTHROPIC_API_KEY: a, GEMINI_API_KEY: g, OPENAI_API_KEY: o}\n"
    )
    described = describe_backends(load_server_config(config))
    lines = [line for line in described if line.startswith("approvals: ")]
    assert lines[0].startswith("approvals: claude-code asks before tool calls")
    assert all(
        "cannot ask before tool calls" in line for line in lines if "claude-code" not in line
    )
    assert {line.split()[1] for line in lines} == {"claude-code", "gemini-cli", "codex"}
    without = config.read_text().replace("  approvals: {}\n", "")
    config.write_text(without)
    assert not [
        line
        for line in describe_backends(load_server_config(config))
        if line.startswith("approvals:")
    ]
