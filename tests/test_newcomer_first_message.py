"""A newcomer's first messages at the console, through the real ``gateway-bot chat`` and the
real Claude Code CLI (host mode, the fake model API): what they see when their key is
wrong, when their repo cannot be cloned, and what the console's own commands answer."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.conftest import write_config
from tests.fake_anthropic import FakeAnthropic


def test_a_key_the_model_api_refuses_is_one_clear_line_not_minutes_of_silence(
    gateway: Any, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic
) -> None:
    # The CLI's own retries, as a user has them (the other tests turn them off): on a 401
    # it retried ten times with back-off, some three minutes behind "Working on it", then
    # said only "API Error: 401".
    config = write_config(
        tmp_path,
        target_repo,
        fake_api,
        agent={
            "env": {"ANTHROPIC_BASE_URL": fake_api.base_url, "ANTHROPIC_API_KEY": "sk-typo"},
        },
    )
    fake_api.fail_next(401, "invalid x-api-key")  # the retry alone would then have passed
    chat = gateway("chat", "--config", str(config))
    chat.expect("gateway-bot console")
    chat.send("hello from a newcomer")
    chat.expect(
        r"^error> The model API refused the agent's credentials \(HTTP 401\): set a valid "
        r"ANTHROPIC_API_KEY \(or CLAUDE_CODE_OAUTH_TOKEN, made by `claude setup-token`\)",
        timeout=90,
    )
    assert len(fake_api.asked_about("hello from a newcomer")) == 1, "stopped at the refusal"
    chat.finish()
    assert "Traceback" not in chat.stderr
    assert not re.search(r"^agent>", "\n".join(chat.lines), re.MULTILINE)
