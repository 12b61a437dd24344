"""What the agent does in a conversation: files it sends back, sessions it cannot resume."""

from __future__ import annotations

from pathlib import Path

from tests.fake_anthropic import FakeAnthropic


def test_a_file_the_agent_writes_to_the_outbox_goes_out_once(
    gateway, config_path: Path, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(config_path))
    chat.send("WRITE_FILE name=../outbox/report.txt text=all good")
    chat.expect(r"^  · Write: .*/outbox/report\.txt$")
    chat.expect(r"^agent> Echo: WRITE_FILE")
    sent = chat.expect(r"^  \[file\] .*/sent/[0-9a-f]{12}/report\.txt$")
    assert Path(sent.split("[file] ")[1]).read_text() == "all good"
    chat.send("anything else?")
    chat.expect(r"^agent> Echo: anything else\?$")
    chat.expect(r"^  \[\$")
    chat.finish()
    assert chat.count(r"\[file\]") == 1, "a sent file must not go out with later replies"


def test_an_unresumable_session_is_retried_fresh_with_the_last_reply(
    gateway, config_path: Path, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(config_path))
    chat.send("the first question")
    chat.expect(r"^agent> Echo: the first question$")
    # The CLI compacts by itself on "prompt is too long"; a request the API refuses
    # outright (a corrupt history) is what leaves the session unresumable.
    fake_api.fail_next(400, "messages.2: tool_use ids were found without tool_result blocks")
    chat.send("the second question")
    chat.expect(r"^agent> Echo: ")
    chat.expect(r"^the second question$")
    chat.finish()
    assert chat.count(r"^error> ") == 0
    retry = " ".join(fake_api.user_texts(fake_api.requests[-1]))
    assert "could not be resumed" in retry
    assert "Echo: the first question" in retry, "the retry carries the last reply"


def test_a_run_past_the_repo_timeout_is_stopped_and_reported(
    gateway, tmp_path: Path, fake_api: FakeAnthropic
) -> None:
    from tests.conftest import make_repo, write_config

    repo = make_repo(tmp_path / "repo", {".gateway/config.yaml": "timeout_seconds: 3\n"})
    config = write_config(tmp_path, repo, fake_api)
    fake_api.hold("NEVER ENDS")
    chat = gateway("chat", "--config", str(config))
    chat.send("NEVER ENDS")
    chat.expect(r"^error> the agent ran past its time limit and was stopped$")
    chat.finish()
