"""Files both ways: a file sent to the room lands in the conversation's inbox under a safe
name and is named to the agent; a file the agent writes to its outbox comes back with the
reply. A file over the size limit gets a clear answer instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fake_anthropic import FakeAnthropic
from tests.support.synapse_fixtures import (
    SynapseServer,
    bot_text,
    matrix_config,
    membership,
)

pytestmark = pytest.mark.slow


async def test_file_in_and_file_out(
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
        tmp_path, target_repo, fake_api, synapse, bot, [alice.user_id], max_file_mb=0.002
    )
    gateway("run", "--config", str(config))
    await alice.wait_for(room, membership(bot.user_id, "join"))

    await alice.send_file(room, "big.log", b"x" * 5000, caption="TOO-BIG look at this")
    await alice.wait_for(
        room, bot_text(bot.user_id, r"big\.log \(5 KB\) is over the 2 KB limit for files")
    )
    await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*TOO-BIG"))

    await alice.send_file(
        room,
        "../secret dir/my notes.txt",
        b"the notes",
        caption="WRITE_FILE name=../outbox/report.txt text=REPORT-BODY",
    )
    await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*WRITE_FILE"))
    told = " ".join(fake_api.user_texts(fake_api.requests[-1]))
    assert "/inbox/my_notes.txt]" in told
    saved = list((tmp_path / "state" / "conversations").glob("*/inbox/my_notes.txt"))
    assert [p.read_bytes() for p in saved] == [b"the notes"]

    sent = await alice.wait_for(
        room,
        lambda e: (
            e.get("sender") == bot.user_id and (e.get("content") or {}).get("msgtype") == "m.file"
        ),
    )
    assert sent["content"]["body"] == "report.txt"
    assert await alice.download(sent["content"]["url"]) == b"REPORT-BODY"
