"""The shared chat commands and bad input, as a console user sees them."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import write_config
from tests.support.fake_anthropic import FakeAnthropic


def test_stop_cancels_the_running_task_and_the_queue_goes_on(
    gateway, config_path: Path, fake_api: FakeAnthropic
) -> None:
    fake_api.hold("SLOW JOB")
    chat = gateway("chat", "--config", str(config_path))
    chat.send("SLOW JOB please")
    assert fake_api.wait_for_held(60), "the agent never asked the model"
    chat.send("second message")
    chat.expect(r"^… Queued behind 1 task\(s\)\.")
    chat.send("/status")
    chat.expect(r"^agent> Conversation [0-9a-f]{8} ")
    chat.expect(r"^Running task [0-9a-f]{12} for \d+ s: SLOW JOB please$")
    chat.expect(r"^1 waiting:$")
    chat.expect(r"^  1\. second message$")
    chat.send("/stop")
    chat.expect(r"^agent> Stopping task [0-9a-f]{12}…$")
    chat.expect(r"^agent> Stopped\. The task was cancelled with /stop\.$")
    fake_api.release()
    chat.expect(r"^agent> Echo: second message$")
    chat.finish()
    assert chat.count(r"Echo: SLOW JOB") == 0


def test_stop_with_nothing_running(gateway, config_path: Path, fake_api: FakeAnthropic) -> None:
    chat = gateway("chat", "--config", str(config_path))
    chat.send("!stop")
    chat.expect(r"^agent> Nothing is running in this conversation\.$")
    chat.finish()


def test_unknown_command_and_empty_message_get_clear_errors(
    gateway, config_path: Path, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(config_path))
    chat.send("/frobnicate now")
    chat.expect(r"^error> Unknown command 'frobnicate'\. Commands: /stop")
    chat.send("   ")
    chat.expect(r"^error> Your message was empty: nothing to do\.$")
    chat.send("/etc/hosts looks odd, can you check")
    chat.expect(r"^agent> Echo: /etc/hosts looks odd, can you check$")
    chat.finish()
    assert len(fake_api.requests) == 2, "only the real message reached the agent"


def test_model_applies_to_the_next_new_session(
    gateway, config_path: Path, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(config_path))
    chat.send("first")
    chat.expect(r"^agent> Echo: first$")
    chat.send("/model claude-test-model")
    chat.expect(r"^agent> Model claude-test-model will be used from the next new session")
    chat.send("/new")
    chat.expect(r"^agent> Started a new conversation \([0-9a-f]{8}\)")
    chat.send("second")
    chat.expect(r"^agent> Echo: second$")
    chat.finish()
    assert fake_api.requests[0]["model"] != "claude-test-model"
    assert fake_api.requests[-1]["model"] == "claude-test-model"


def test_a_full_queue_refuses_with_a_message(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic
) -> None:
    config = write_config(
        tmp_path, target_repo, fake_api, execution={"max_pending_per_conversation": 1}
    )
    fake_api.hold("BLOCK")
    chat = gateway("chat", "--config", str(config))
    chat.send("BLOCK here")
    assert fake_api.wait_for_held(60)
    chat.send("waits")
    chat.expect(r"^… Queued behind 1 task\(s\)\.")
    chat.send("overflows")
    chat.expect(r"^refused> This conversation already has 1 messages waiting")
    fake_api.release()
    chat.expect(r"^agent> Echo: BLOCK here$")
    chat.expect(r"^agent> Echo: waits$")
    chat.finish()
    assert chat.count("Echo: overflows") == 0


def test_repo_config_using_env_is_reported_to_the_user(
    gateway, tmp_path: Path, fake_api: FakeAnthropic
) -> None:
    from tests.conftest import make_repo

    repo = make_repo(
        tmp_path / "repo", {".gateway/config.yaml": "container_env:\n  LEAK: !env HOME\n"}
    )
    config = write_config(tmp_path, repo, fake_api)
    chat = gateway("chat", "--config", str(config))
    chat.send("hello")
    chat.expect(r"^error> The repo config \.gateway/config\.yaml has problems:$")
    chat.expect(r"^- line 2: !env is not allowed in a repo config")
    chat.finish()
    assert fake_api.requests == []


def test_revoke_is_for_owners_only(gateway, config_path: Path, fake_api: FakeAnthropic) -> None:
    chat = gateway("chat", "--config", str(config_path))
    chat.send("/revoke @mallory:example.org everywhere")
    chat.expect(r"^agent> Only an owner of this bot can revoke approvals\.$")
    chat.finish()
    assert fake_api.requests == []
