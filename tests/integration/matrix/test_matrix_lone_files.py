"""Element sends a file as a message of its own and the words about it as the next: on real
Synapse the two are one agent run, which sees the file and the words, with one answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fake_anthropic import FakeAnthropic
from tests.support.synapse_fixtures import SynapseServer, bot_text, matrix_config, membership

pytestmark = pytest.mark.slow


async def test_a_file_then_its_caption_is_one_run(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice = await meet("alice")
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id])
    config = matrix_config(
        tmp_path,
        target_repo,
        fake_api,
        synapse,
        bot,
        [alice.user_id],
        sections={"execution": {"files_wait_seconds": 120}},
    )
    gateway("run", "--config", str(config))
    await alice.wait_for(room, membership(bot.user_id, "join"))

    await alice.send_file(room, "build.log", b"LONE-LOG error: disk full")
    await alice.say(room, "CAPTION why did the build fail?")
    await alice.wait_for(room, bot_text(bot.user_id, r"Echo: CAPTION why did the build fail\?"))

    answers = [e for e in await alice.history(room) if bot_text(bot.user_id, r"^Echo:")(e)]
    assert len(answers) == 1, [e["content"]["body"] for e in answers]
    acks = [e for e in await alice.history(room) if bot_text(bot.user_id, r"^Working on it")(e)]
    assert len(acks) == 1, "one run, one acknowledgement"
    prompt = " ".join(fake_api.user_texts(fake_api.requests[0]))
    assert "/inbox/build.log]" in prompt
    assert "CAPTION why did the build fail?" in prompt
    saved = list((tmp_path / "state" / "conversations").glob("*/inbox/build.log"))
    assert [p.read_bytes() for p in saved] == [b"LONE-LOG error: disk full"]
