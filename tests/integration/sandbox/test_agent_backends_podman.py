"""Gemini CLI and Codex inside the real agent container, behind the egress proxy, each
against its fake API on the host's loopback (reached through the daemon's model relay, as
tests/integration/agents/test_local_model_endpoint.py shows for Claude Code). The image holds
the enabled
CLI; the real key stays with the proxy, which adds it on the way to the model API."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write_config
from tests.support.fake_gemini import FakeGemini
from tests.support.fake_openai import FakeOpenAI
from tests.support.sandbox_fixtures import SandboxSetup

pytestmark = pytest.mark.slow


@pytest.fixture
def fake_gemini() -> Iterator[FakeGemini]:
    with FakeGemini() as server:
        yield server


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def _config(sandbox: SandboxSetup, agent: dict[str, Any]) -> Path:
    settings = {
        "kind": "podman",
        "deployment": sandbox.deployment,
        "egress_network": sandbox.egress.name,
        "podman": {"socket": str(sandbox.podman_socket)},
    }
    return write_config(sandbox.tmp_path, sandbox.repo, sandbox.api, sandbox=settings, agent=agent)


def test_gemini_in_the_container_answers_shows_its_tool_call_and_resumes(
    gateway, sandbox: SandboxSetup, fake_gemini: FakeGemini
) -> None:
    key = f"gemini-{secrets.token_hex(8)}"
    agent = {
        "backend": "gemini-cli",
        "timeout_seconds": 300,
        "env": {"GEMINI_API_KEY": key, "GOOGLE_GEMINI_BASE_URL": fake_gemini.base_url},
    }
    chat = gateway("chat", "--config", str(_config(sandbox, agent)))
    chat.send("the first question")
    chat.expect(r"^  · run_shell_command: echo tool-ran$", timeout=600)
    chat.expect(r"^agent> Echo: the first question$", timeout=300)
    chat.send("the second question")
    chat.expect(r"^agent> Echo: the second question$", timeout=300)
    chat.finish()
    last = fake_gemini.requests[-1]
    assert any("the first question" in t for t in fake_gemini.user_texts(last))
    assert "Echo: the first question" in fake_gemini.model_texts(last)
    keys = {seen.get("x-goog-api-key") for _, seen in fake_gemini.credentials_seen}
    assert keys == {key}, "the proxy put the real key on every model request"


def test_codex_in_the_container_answers_shows_its_tool_call_and_resumes(
    gateway, sandbox: SandboxSetup, fake_openai: FakeOpenAI
) -> None:
    key = f"sk-{secrets.token_hex(8)}"
    agent = {
        "backend": "codex",
        "timeout_seconds": 300,
        "env": {"OPENAI_API_KEY": key, "OPENAI_BASE_URL": f"{fake_openai.base_url}/v1"},
    }
    chat = gateway("chat", "--config", str(_config(sandbox, agent)))
    chat.send("the first question")
    chat.expect(r"^  · shell: echo tool-ran$", timeout=600)
    chat.expect(r"^agent> Echo: the first question$", timeout=300)
    chat.send("the second question")
    chat.expect(r"^agent> Echo: the second question$", timeout=300)
    chat.finish()
    last = fake_openai.requests[-1]
    assert any("the first question" in t for t in fake_openai.user_texts(last))
    assert "Echo: the first question" in fake_openai.assistant_texts(last)
    assert {seen for _, seen in fake_openai.credentials_seen} == {f"Bearer {key}"}
