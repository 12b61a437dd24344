"""A user at the console: chats with the real Claude Code CLI (against the fake model API),
sees progress and a usage line, comes back later to the same conversation, or starts anew."""

from __future__ import annotations

from pathlib import Path

from tests.support.fake_anthropic import FakeAnthropic


def test_message_gets_progress_reply_and_usage(
    gateway, config_path: Path, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(config_path))
    chat.expect(r"^gateway-bot console · conversation default \([0-9a-f]{8}\)")
    chat.send("please say hello")
    chat.expect(r"^… Working on it… \(task [0-9a-f]{12}\)")
    chat.expect(r"^  · Bash: echo tool-ran$")
    chat.expect(r"^agent> Echo: .*please say hello")
    chat.expect(r"^  \[\$\d+\.\d{4} · 2 turns · \d+\.\d s\]$")
    chat.finish()
    assert chat.count(r"^agent> ") == 1


def test_restart_resumes_the_same_conversation(
    gateway, config_path: Path, fake_api: FakeAnthropic
) -> None:
    first = gateway("chat", "--config", str(config_path))
    first.send("remember the word PINEAPPLE")
    first.expect(r"^agent> Echo: .*PINEAPPLE")
    first.finish()
    banner = first.lines[0]

    second = gateway("chat", "--config", str(config_path))
    resumed = second.expect(r"^gateway-bot console · conversation default \(([0-9a-f]{8})\)")
    assert "(new)" not in resumed
    second.send("what was the word?")
    second.expect(r"^agent> Echo: .*what was the word\?")
    second.finish()

    last = fake_api.requests[-1]
    history = " ".join(fake_api.user_texts(last))
    assert "PINEAPPLE" in history, "the resumed session must carry the first message"
    assert banner == resumed, "the same conversation, named by its id both times"


def test_new_flag_starts_a_fresh_conversation(
    gateway, config_path: Path, fake_api: FakeAnthropic
) -> None:
    first = gateway("chat", "--config", str(config_path))
    first.send("remember the word MANGO")
    first.expect(r"^agent> Echo: .*MANGO")
    first.finish()

    fresh = gateway("chat", "--config", str(config_path), "--new")
    fresh.expect(r"^gateway-bot console · conversation default \([0-9a-f]{8}\)")
    fresh.send("anything from before?")
    fresh.expect(r"^agent> Echo: .*anything from before\?")
    fresh.finish()
    history = " ".join(fake_api.user_texts(fake_api.requests[-1]))
    assert "MANGO" not in history
