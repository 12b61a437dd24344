"""Configs a user gets wrong: every problem reported with its key path, nothing started."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway_bot.config.repo import parse_repo_config
from gateway_bot.config.sandbox import PodmanSettings
from gateway_bot.config.yaml_tags import ConfigError, SecretRef
from tests.conftest import gateway_env


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway_bot", *args],
        capture_output=True,
        text=True,
        env=env or gateway_env(),
        timeout=60,
        check=False,
    )


def test_check_reports_every_wrong_type_with_its_key_path(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(
        "repo: {url: /tmp/x}\n"
        "agent: {timeout_seconds: soon}\n"
        "execution: {max_concurrent_tasks: -1, max_pending: 2}\n"
    )
    result = run_cli("check", "--config", str(config))
    assert result.returncode == 2
    assert "agent.timeout_seconds: Input should be a valid number" in result.stderr
    assert "got 'soon'" in result.stderr
    assert "execution.max_concurrent_tasks: Input should be greater than 0" in result.stderr
    assert "execution.max_pending: Extra inputs are not permitted" in result.stderr


def test_bad_config_never_starts_the_daemon(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("agent: {model: 3}\n")  # no repo: the current one (this checkout)
    result = run_cli("run", "--config", str(config))
    assert result.returncode == 2
    assert "agent.model: Input should be a valid string (got 3)" in result.stderr
    outside = subprocess.run(
        [sys.executable, "-m", "gateway_bot", "run", "--config", str(config)],
        cwd=tmp_path,  # not in a git repo: no repo to default to
        env=gateway_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert outside.returncode == 2
    assert "repo: Field required (add this key)" in outside.stderr


def test_env_tag_reads_environment_and_dotenv(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("REPO_FROM_DOTENV=/srv/repo\n")
    config = tmp_path / "ok.yaml"
    config.write_text("repo: {url: !env REPO_FROM_DOTENV}\nagent: {model: !env MISSING_VAR}\n")
    result = run_cli("check", "--config", str(config))
    assert result.returncode == 2
    assert "!env MISSING_VAR is not set" in result.stderr
    config.write_text("repo: {url: !env REPO_FROM_DOTENV}\n")
    result = run_cli("check", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert "repo /srv/repo" in result.stdout


def test_missing_model_credentials_is_one_clear_line(tmp_path: Path) -> None:
    config = tmp_path / "ok.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\nrepo: {{url: /tmp/x}}\n")
    result = run_cli("chat", "--config", str(config))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("No model credentials: set ANTHROPIC_API_KEY")


def test_repo_config_refuses_env_and_resolves_secrets() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_repo_config("container_env:\n  TOKEN: !env HOME\n")
    assert "!env is not allowed in a repo config" in caught.value.problems[0]

    config = parse_repo_config("model: opus\ncontainer_env:\n  TOKEN: !secret gh\n  PLAIN: x\n")
    assert config.container_env["TOKEN"] == SecretRef("gh")
    assert config.resolved_env({"gh": "s3cret"}) == {"TOKEN": "s3cret", "PLAIN": "x"}
    with pytest.raises(ConfigError, match="secret 'gh' is not in the server"):
        config.resolved_env({})


def test_an_https_loopback_model_endpoint_with_the_podman_sandbox_is_refused_up_front(
    tmp_path: Path,
) -> None:
    """A loopback endpoint is relayed to the sandbox (test_local_model_endpoint.py), over
    plain HTTP only: no certificate for localhost names the relay's address."""
    config = tmp_path / "ok.yaml"
    config.write_text(
        f"state_dir: {tmp_path / 'state'}\nrepo: {{url: /tmp/x}}\n"
        "agent: {env: {ANTHROPIC_API_KEY: k, ANTHROPIC_BASE_URL: 'https://127.0.0.1:9'}}\n"
    )
    result = run_cli("chat", "--config", str(config))
    assert result.returncode == 2
    assert "https://127.0.0.1:9 is on this host's loopback" in result.stderr
    assert "use http:// there" in result.stderr


def test_a_repo_may_not_redirect_gemini_or_codex_to_its_own_endpoint_or_home() -> None:
    """The attack: a repo pointing the CLI at a server of its choosing (which would receive
    the prompts and, without the proxy, the key) or at a home with its own settings."""
    text = "container_env:\n" + "".join(
        f"  {name}: x\n"
        for name in (
            "GOOGLE_GEMINI_BASE_URL",
            "GEMINI_API_KEY",
            "GEMINI_CLI_HOME",
            "OPENAI_BASE_URL",
            "OPENAI_API_KEY",
            "CODEX_HOME",
        )
    )
    with pytest.raises(ConfigError) as caught:
        parse_repo_config(text)
    problems = " ".join(caught.value.problems)
    for name in ("GOOGLE_GEMINI_BASE_URL", "GEMINI_CLI_HOME", "OPENAI_BASE_URL", "CODEX_HOME"):
        assert f"{name} may not be set by the repo" in problems
    assert parse_repo_config("agent: codex\n").agent == "codex"


def test_podman_hosts_need_unique_names_and_a_podman_service_url(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(
        "repo: {url: /tmp/x}\n"
        "sandbox:\n"
        "  podman:\n"
        "    hosts:\n"
        "      - {name: alpha, url: 'unix:///run/podman/podman.sock'}\n"
        "      - {name: alpha, url: 'ssh://gwb@beta/run/podman/podman.sock', capacity: 0}\n"
        "      - {name: gamma, url: 'http://gamma:8080'}\n"
    )
    result = run_cli("check", "--config", str(config))
    assert result.returncode == 2
    assert "sandbox.podman.hosts.1.capacity: Input should be greater than 0" in result.stderr
    assert "sandbox.podman.hosts.2.url" in result.stderr
    assert "unix:///PATH or ssh://USER@HOST/PATH" in result.stderr
    twice = {"name": "alpha", "url": "unix:///run/podman/podman.sock"}
    with pytest.raises(ValidationError, match=r"host names must be unique: \['alpha', 'alpha'\]"):
        PodmanSettings.model_validate({"hosts": [twice, twice]})
