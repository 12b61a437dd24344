"""Gemini CLI as the agent: the real ``gemini`` against the fake Gemini API on loopback,
in host mode (``sandbox: none``), chosen per deployment, per conversation and per repo."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_repo, write_config
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_gemini import FakeGemini


@pytest.fixture(scope="session")
def fake_gemini_server() -> Iterator[FakeGemini]:
    with FakeGemini() as server:
        yield server


@pytest.fixture
def fake_gemini(fake_gemini_server: FakeGemini) -> Iterator[FakeGemini]:
    fake_gemini_server.reset()
    yield fake_gemini_server
    fake_gemini_server.reset()


def _agent(api: FakeAnthropic, gemini: FakeGemini, **settings: Any) -> dict[str, Any]:
    return {
        "timeout_seconds": 120,
        "env": {
            "ANTHROPIC_BASE_URL": api.base_url,
            "ANTHROPIC_API_KEY": "test-key",
            "CLAUDE_CODE_MAX_RETRIES": "0",
            "GEMINI_API_KEY": "gemini-test-key",
            "GOOGLE_GEMINI_BASE_URL": gemini.base_url,
        },
        **settings,
    }


def test_gemini_answers_shows_its_tool_call_and_resumes_with_the_history(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_gemini: FakeGemini
) -> None:
    agent = _agent(
        fake_api, fake_gemini, backend="gemini-cli", backends={"gemini-cli": {"model": "gem-x"}}
    )
    config = write_config(tmp_path, target_repo, fake_api, agent=agent)
    chat = gateway("chat", "--config", str(config))
    chat.send("the first question")
    chat.expect(r"^  · run_shell_command: echo tool-ran$", timeout=120)
    chat.expect(r"^agent> Echo: the first question$", timeout=120)
    chat.send("the second question")
    chat.expect(r"^agent> Echo: the second question$", timeout=120)
    chat.finish()
    assert chat.count(r"^error> ") == 0
    assert not fake_api.asked_about("question"), "Claude Code was not asked"
    last = fake_gemini.requests[-1]
    history = fake_gemini.user_texts(last)
    assert any("the first question" in text for text in history), history
    assert "the second question" in history[-1]
    assert "Echo: the first question" in fake_gemini.model_texts(last)
    offered = fake_gemini.tool_names(last)
    assert "run_shell_command" in offered
    assert not {"ask_user", "enter_plan_mode", "exit_plan_mode"} & offered, "interactive-only"
    assert {seen.get("x-goog-api-key") for _, seen in fake_gemini.credentials_seen} == {
        "gemini-test-key"
    }


def test_agent_command_switches_a_new_conversation_to_gemini(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_gemini: FakeGemini
) -> None:
    agent = _agent(fake_api, fake_gemini, enabled=["gemini-cli"])
    config = write_config(tmp_path, target_repo, fake_api, agent=agent)
    chat = gateway("chat", "--config", str(config))
    chat.send("/agent")
    chat.expect(
        r"Usage: /agent NAME \(offered: claude-code, gemini-cli\)\. "
        r"This conversation uses claude-code\."
    )
    chat.send("/agent codex")
    chat.expect(r"No agent 'codex' here\. Offered: claude-code, gemini-cli\.")
    chat.send("asked of claude")
    chat.expect(r"^agent> Echo: asked of claude$")
    chat.send("/agent gemini-cli")
    chat.expect(r"Agent gemini-cli will be used from the next new session \(/new\)\.")
    chat.send("/new")
    chat.expect(r"Started a new conversation")
    chat.send("asked of gemini")
    chat.expect(r"^agent> Echo: asked of gemini$", timeout=120)
    chat.send("/agent")
    chat.expect(r"This conversation uses gemini-cli\.")
    chat.finish()
    assert [fake_api.user_texts(r)[-1] for r in fake_api.requests][-1].endswith("asked of claude")
    assert fake_gemini.requests, "the new conversation's session is Gemini CLI's"
    assert not any(
        "asked of claude" in text
        for request in fake_gemini.requests
        for text in fake_gemini.user_texts(request)
    )


def test_a_repo_may_choose_only_an_agent_the_server_offers(
    gateway, tmp_path: Path, fake_api: FakeAnthropic, fake_gemini: FakeGemini
) -> None:
    """The repo config is the repo's to write: naming a CLI the operator did not enable
    (here Gemini CLI, installed but not offered) runs nothing."""
    repo = make_repo(tmp_path / "repo", {".gateway/config.yaml": "agent: gemini-cli\n"})
    config = write_config(tmp_path, repo, fake_api, agent=_agent(fake_api, fake_gemini))
    chat = gateway("chat", "--config", str(config))
    chat.send("hello")
    chat.expect(r"agent: 'gemini-cli' is not offered here \(offered: claude-code\)")
    chat.finish()
    assert not fake_gemini.requests
    assert not fake_api.asked_about("hello")


def test_a_repo_chooses_gemini_when_the_server_offers_it(
    gateway, tmp_path: Path, fake_api: FakeAnthropic, fake_gemini: FakeGemini
) -> None:
    repo = make_repo(tmp_path / "repo", {".gateway/config.yaml": "agent: gemini-cli\n"})
    agent = _agent(fake_api, fake_gemini, enabled=["gemini-cli"])
    config = write_config(tmp_path, repo, fake_api, agent=agent)
    chat = gateway("chat", "--config", str(config))
    chat.send("hello repo")
    chat.expect(r"^agent> Echo: hello repo$", timeout=120)
    chat.finish()
    assert fake_gemini.requests
    assert not fake_api.asked_about("hello repo")


def test_a_lost_gemini_session_is_retried_fresh_with_the_last_reply(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_gemini: FakeGemini
) -> None:
    config = write_config(
        tmp_path, target_repo, fake_api, agent=_agent(fake_api, fake_gemini, backend="gemini-cli")
    )
    chat = gateway("chat", "--config", str(config))
    chat.send("the first question")
    chat.expect(r"^agent> Echo: the first question$", timeout=120)
    sessions = list((tmp_path / "state").glob("conversations/*/home/.gemini/tmp/*/chats/*"))
    assert sessions, "Gemini CLI keeps its session in the agent home"
    for session in sessions:
        session.unlink()
    chat.send("the second question")
    chat.expect(r"^agent> Echo: ", timeout=120)
    chat.expect(r"^the second question$", timeout=120)
    chat.finish()
    assert chat.count(r"^error> ") == 0
    retry = " ".join(fake_gemini.user_texts(fake_gemini.requests[-1]))
    assert "could not be resumed" in retry
    assert "Echo: the first question" in retry, "the retry carries the last reply"
