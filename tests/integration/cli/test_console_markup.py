"""The console shows chat text as terminal text, not chat markup: /help is a list, a card is
numbered choices the person answers by typing the number, and no backticks, ``\\*``
escapes, code fences or button ids reach the screen. Standard output here is a pipe (not a
terminal): plain text, with no escape codes at all.

The real `gateway-bot run` with the console channel; the agent is the real claude CLI
against the fake model API, asking to `git push` under action approvals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write_config
from tests.integration.agents.test_action_approvals_claude import PUSH, _bare_remote, _remote_log
from tests.support.fake_anthropic import FakeAnthropic

pytestmark = pytest.mark.slow


def test_a_person_at_the_console_reads_plain_text_and_answers_a_card_by_its_number(
    gateway: Any, tmp_path: Path, fake_api: FakeAnthropic
) -> None:
    remote = _bare_remote(tmp_path)
    config = write_config(
        tmp_path, remote, fake_api, agent={"approvals": {}, "max_warm_sessions": 0}
    )
    chat = gateway("run", "--config", str(config))

    chat.send("/help")
    chat.expect(r"^agent> Commands \(! works instead of /\):$")
    chat.expect(r"^ • /stop: cancel the running task$")
    chat.expect(
        r"^ • /schedule \[TZ=Zone\] WHEN PROMPT: WHEN is a quoted cron rule \"0 9 \* \* 1-5\""
    )
    chat.expect(r"^ • /help: this list$")

    chat.send(f"SHOW_RESULT RUN_BASH {PUSH}")
    chat.expect(r"^\[The agent asks to run: ")
    chat.expect(r"^  1\) Allow once$")
    chat.expect(r"^  2\) Always in this conversation$")
    chat.expect(r"^  3\) Deny$")
    chat.expect(r"^Type the number of your choice\.$")
    assert "approved-push" not in _remote_log(remote)

    chat.send("1")
    chat.expect(r"^\[The agent asked to run\]$")
    chat.expect(r"^Allowed by ")
    chat.expect(r"^agent> Echo: SHOW_RESULT RUN_BASH")
    assert "approved-push" in _remote_log(remote), "the push ran once allowed"

    shown = "\n".join(chat.lines)
    for markup in ("`", "\\*", "(action:", "\x1b"):
        assert markup not in shown, f"{markup!r} on the console:\n{shown}"
