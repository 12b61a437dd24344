"""A file shared without words (Slack's mobile apps send the words as the next message)
waits for them on the real daemon and the fake Slack, even across a kill -9: the words then
get one answer, from one agent run that saw the file."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.integration.slack.test_slack_daemon import ALICE, DM, people, slack_config
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import BOT_USER, FakeSlack


def test_a_file_waits_for_its_words_even_across_a_kill(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    people(fake_slack)
    config = slack_config(tmp_path, target_repo, fake_api, fake_slack)
    settings = yaml.safe_load(config.read_text())
    settings["execution"] = {"files_wait_seconds": 120}
    config.write_text(yaml.safe_dump(settings))
    daemon = gateway("run", "--config", str(config))
    fake_slack.wait_connected(1)

    shared = fake_slack.user_says(ALICE, DM, "", files=[("notes.txt", b"LONE-NOTES")])
    fake_slack.wait_until(lambda: not fake_slack.pending, what="the file acknowledged")
    daemon.kill()

    gateway("run", "--config", str(config))
    fake_slack.wait_connected(2)
    words = fake_slack.user_says(ALICE, DM, "LONE-WORDS what is in this file?")
    fake_slack.wait_for_reply(DM, words, "Echo: LONE-WORDS what is in this file?")

    answers = [
        m for m in fake_slack.messages[DM] if m.get("user") == BOT_USER and "Echo:" in m["text"]
    ]
    assert len(answers) == 1, [m["text"] for m in answers]
    assert not fake_slack.bot_posts(DM, shared), "nothing answered the file on its own"
    prompt = " ".join(fake_api.user_texts(fake_api.requests[0]))
    assert "inbox/notes.txt" in prompt
    assert "LONE-WORDS" in prompt
    saved = list((tmp_path / "state" / "conversations").glob("*/inbox/notes.txt"))
    assert [p.read_bytes() for p in saved] == [b"LONE-NOTES"]
