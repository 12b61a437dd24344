"""What the agent does in a conversation: files it sends back, sessions it cannot resume."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import write_config
from tests.support.fake_anthropic import FakeAnthropic


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


INTERACTIVE_TOOLS = {
    "AskUserQuestion",
    "EnterPlanMode",
    "ExitPlanMode",
    "EnterWorktree",
    "ExitWorktree",
}


def test_the_agent_is_never_offered_interactive_only_tools(
    gateway, config_path: Path, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(config_path))
    chat.send("what tools do you have?")
    chat.expect(r"^agent> Echo: what tools do you have\?$")
    chat.finish()
    offered = {tool["name"] for request in fake_api.requests for tool in request["tools"]}
    assert "Bash" in offered, "the request lists the agent's tools"
    assert offered.isdisjoint(INTERACTIVE_TOOLS), offered & INTERACTIVE_TOOLS


@pytest.mark.parametrize("warm_sessions", [0, 4], ids=["cold", "warm"])
def test_a_model_api_that_stops_streaming_is_detected_and_the_next_message_works(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, warm_sessions: int
) -> None:
    agent = {"stall_seconds": 3, "max_warm_sessions": warm_sessions}
    chat = gateway(
        "chat", "--config", str(write_config(tmp_path, target_repo, fake_api, agent=agent))
    )
    chat.send("remember the word kumquat")
    chat.expect(r"^agent> Echo: remember the word kumquat$")
    fake_api.stall("STALLS")
    chat.send("STALLS after one step")
    chat.expect(
        r"^error> The agent stopped responding: nothing came from it for \d+ s after its last "
        r"step \(Bash: echo tool-ran\), so it was stopped\. Send another message to continue"
    )
    chat.send("are you back?")
    chat.expect(r"^agent> Echo: are you back\?$")
    assert "remember the word kumquat" in " ".join(fake_api.user_texts(fake_api.requests[-1]))
    chat.finish()
    fake_api.release()


def test_a_command_within_its_own_declared_time_limit_is_not_taken_for_stuck(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic
) -> None:
    agent = {"stall_seconds": 2}
    chat = gateway(
        "chat", "--config", str(write_config(tmp_path, target_repo, fake_api, agent=agent))
    )
    chat.send("RUN_BASH timeout=60000 sleep 5 && echo slept")
    chat.expect(r"^agent> Echo: RUN_BASH timeout=60000 sleep 5 && echo slept$")
    chat.send("RUN_BASH sleep 5 && echo slept")  # no declared limit: 5 s of silence is too long
    chat.expect(r"^error> The agent stopped responding: .*\(Bash: sleep 5 && echo slept\)")
    chat.finish()
