"""Codex CLI as the agent: the real ``codex`` against the fake OpenAI Responses API on
loopback, in host mode (``sandbox: none``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import write_config
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_openai import FakeOpenAI


@pytest.fixture(scope="session")
def fake_openai_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def fake_openai(fake_openai_server: FakeOpenAI) -> Iterator[FakeOpenAI]:
    fake_openai_server.reset()
    yield fake_openai_server
    fake_openai_server.reset()


def test_codex_answers_shows_its_tool_call_and_resumes_with_the_history(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_openai: FakeOpenAI
) -> None:
    agent = {
        "backend": "codex",
        "backends": {"codex": {"model": "gpt-fake"}},
        "env": {
            "OPENAI_API_KEY": "openai-test-key",
            "OPENAI_BASE_URL": f"{fake_openai.base_url}/v1",
        },
    }
    config = write_config(tmp_path, target_repo, fake_api, agent=agent)
    chat = gateway("chat", "--config", str(config))
    chat.send("the first question")
    chat.expect(r"^  · shell: echo tool-ran$")
    chat.expect(r"^agent> Echo: the first question$")
    chat.send("the second question")
    chat.expect(r"^agent> Echo: the second question$")
    chat.finish()
    assert chat.count(r"^error> ") == 0
    assert not fake_api.asked_about("question"), "Claude Code was not asked"
    last = fake_openai.requests[-1]
    assert last["model"] == "gpt-fake"
    history = fake_openai.user_texts(last)
    assert any("the first question" in text for text in history), history
    assert "the second question" in history[-1]
    assert "Echo: the first question" in fake_openai.assistant_texts(last)
    assert {seen for _, seen in fake_openai.credentials_seen} == {"Bearer openai-test-key"}


def test_a_lost_codex_session_is_retried_fresh_with_the_last_reply(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_openai: FakeOpenAI
) -> None:
    agent = {
        "backend": "codex",
        "env": {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": f"{fake_openai.base_url}/v1"},
    }
    config = write_config(tmp_path, target_repo, fake_api, agent=agent)
    chat = gateway("chat", "--config", str(config))
    chat.send("the first question")
    chat.expect(r"^agent> Echo: the first question$")
    codex_homes = list((tmp_path / "state").glob("conversations/*/home/.codex"))
    assert len(codex_homes) == 1
    for rollout in codex_homes[0].rglob("rollout-*"):
        rollout.unlink()
    for database in codex_homes[0].glob("*.sqlite*"):
        database.unlink()
    chat.send("the second question")
    chat.expect(r"^agent> Echo: ")
    chat.expect(r"^the second question$")
    chat.finish()
    assert chat.count(r"^error> ") == 0
    retry = " ".join(fake_openai.user_texts(fake_openai.requests[-1]))
    assert "could not be resumed" in retry
    assert "Echo: the first question" in retry, "the retry carries the last reply"
