"""What only an encrypted message can carry, against real Synapse: the homeserver checks a
plain event's ``m.mentions`` and ``msgtype`` but never sees inside an encrypted one, so its
content is whatever the sender's client wrote. Before the fix a number where a list belongs
(or a list where a string belongs) failed the parse and the allowed sender heard nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.fake_anthropic import FakeAnthropic
from tests.support.synapse_fixtures import SynapseServer, bot_text, matrix_config, membership


async def test_encrypted_content_of_the_wrong_types_is_still_answered(
    gateway: Any,
    meet: Any,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice = await meet("alice", e2ee=True)
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id], encrypted=True, direct=True)
    config = matrix_config(
        tmp_path,
        target_repo,
        fake_api,
        synapse,
        bot,
        [alice.user_id],
        e2ee={"pickle_key": "a-test-pickle-key"},
    )
    gateway("run", "--config", str(config))
    await alice.wait_for(room, membership(bot.user_id, "join"), within=30)

    mentions = {"msgtype": "m.text", "body": "MENTIONS-NUMBER hi", "m.mentions": {"user_ids": 7}}
    await alice.send(room, "m.room.message", mentions)
    await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*MENTIONS-NUMBER"))
    listed = {"msgtype": ["m.text"], "body": "MSGTYPE-LIST hi"}
    await alice.send(room, "m.room.message", listed)
    await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*MSGTYPE-LIST"))
