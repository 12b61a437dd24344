"""A person talks to the bot in Matrix rooms on a real Synapse: invites it, sees it work
(typing, an acknowledgement edited into live progress), gets a formatted reply, uses the
chat commands, and is told clearly when a room is encrypted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.fake_anthropic import FakeAnthropic
from tests.support.synapse_fixtures import (
    SynapseServer,
    bot_edit,
    bot_text,
    content_of,
    matrix_config,
    membership,
    relation_of,
)

pytestmark = pytest.mark.slow

USAGE = r"\$\d+\.\d{4} · \d+ turns? · \d+\.\d s$"


async def test_invite_message_progress_and_formatted_reply(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice = await meet("alice")
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id], name="Project room")
    config = matrix_config(tmp_path, target_repo, fake_api, synapse, bot, [alice.user_id])
    daemon = gateway("run", "--config", str(config))
    await alice.wait_for(room, membership(bot.user_id, "join"))

    fake_api.hold("say hello")
    asked = await alice.say(room, "please say hello:\n\n```python\nprint('hi')\n```")
    ack = await alice.wait_for(room, bot_text(bot.user_id, r"^Working on it…$"))
    assert ack["content"]["msgtype"] == "m.notice"
    assert relation_of(ack)["m.in_reply_to"]["event_id"] == asked
    await alice.wait_typing(room, bot.user_id)
    fake_api.release()

    await alice.wait_for(room, bot_edit(bot.user_id, ack["event_id"], r"Bash: echo tool-ran"))
    reply = await alice.wait_for(room, bot_text(bot.user_id, r"Echo: "))
    content = reply["content"]
    assert content["msgtype"] == "m.text"
    assert content["format"] == "org.matrix.custom.html"
    assert "please say hello" in content["body"]
    assert '<pre><code class="language-python">' in content["formatted_body"]
    assert re.search(USAGE, content["body"].strip()), content["body"]
    await alice.wait_for(room, bot_edit(bot.user_id, ack["event_id"], r"^Done · 1 step"))

    await alice.say(room, "!status")
    status = await alice.wait_for(room, bot_text(bot.user_id, r"Nothing is running"))
    assert content_of(status)["body"].startswith("Conversation ")
    assert daemon.process.poll() is None, daemon.stderr


async def test_strangers_and_former_members_run_nothing(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice, mallory, leon = await meet("alice"), await meet("mallory"), await meet("leon")
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id, mallory.user_id, leon.user_id])
    await mallory.join(room)
    await leon.join(room)
    lair = await mallory.create_room([bot.user_id])
    allowed = [alice.user_id, leon.user_id]
    config = matrix_config(tmp_path, target_repo, fake_api, synapse, bot, allowed)
    daemon = gateway("run", "--config", str(config))
    await alice.wait_for(room, membership(bot.user_id, "join"))
    await mallory.wait_for(lair, membership(bot.user_id, "leave"))

    # While the bot is down, an allowed user speaks and leaves, and a stranger speaks.
    daemon.process.terminate()
    assert daemon.wait() == 0
    await leon.say(room, "LEON-WAS-HERE please run", mention=bot.user_id)
    await leon.leave(room)
    await mallory.say(room, "MALLORY-WANTS please run", mention=bot.user_id)
    await alice.say(room, "ALICE-ASKS please run", mention=bot.user_id)
    gateway("run", "--config", str(config))

    await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*ALICE-ASKS"))
    echoes = [e for e in await alice.history(room) if bot_text(bot.user_id, r"Echo:")(e)]
    assert len(echoes) == 1
    asked = " ".join(" ".join(fake_api.user_texts(r)) for r in fake_api.requests)
    assert "ALICE-ASKS" in asked
    assert "LEON-WAS-HERE" not in asked
    assert "MALLORY-WANTS" not in asked


async def test_with_encryption_off_an_encrypted_room_is_told_once_that_the_bot_cannot_read_it(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice = await meet("alice")
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id], encrypted=True)
    config = matrix_config(
        tmp_path, target_repo, fake_api, synapse, bot, [alice.user_id], e2ee={"enabled": False}
    )
    gateway("run", "--config", str(config))
    await alice.wait_for(room, membership(bot.user_id, "join"))

    ciphertext = {
        "algorithm": "m.megolm.v1.aes-sha2",
        "ciphertext": "AwgAEnACgAkLmt6qF84IK++J7UDH2Za1YVchHyprqTqsg",
        "device_id": alice.account.device_id,
        "sender_key": "IlRMeOPX2e0MurIyfWEucYBRVOEEUMrOHqn/8mLqMjA",
        "session_id": "X3lUlvLELLYxeTx4yOVu6UDpasGEVO0Jbu+QFnm0cKQ",
    }
    await alice.send(room, "m.room.encrypted", ciphertext)
    await alice.send(room, "m.room.encrypted", ciphertext)
    await alice.say(room, "PLAINTEXT-AFTER in the same room")
    await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*PLAINTEXT-AFTER"))

    history = await alice.history(room)
    notices = [e for e in history if bot_text(bot.user_id, r"cannot read end-to-end encrypted")(e)]
    assert len(notices) == 1
    assert notices[0]["content"]["msgtype"] == "m.notice"
