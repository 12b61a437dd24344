"""Undecryptable messages as an attacker sends them, against real Synapse: the outer content
of an ``m.room.encrypted`` event (its ``device_id`` above all) is the sender's to write and
no homeserver checks it. Before the fix the bot told anyone whose message it could not
decrypt, strangers included, and quoted the claimed device id as markdown: a "device" named
like a link became a link in a message the bot posted to the room."""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from tests.support.fake_anthropic import FakeAnthropic
from tests.support.synapse_fixtures import SynapseServer, bot_text, matrix_config, membership

LINK = "[Verify the bot here](https://evil.test/verify)"


def _garbage(device_id: str) -> dict[str, Any]:
    """An encrypted event for a Megolm session nobody ever shared."""
    return {
        "algorithm": "m.megolm.v1.aes-sha2",
        "ciphertext": "AwgAEnB" * 8,
        "sender_key": "x" * 43,
        "session_id": "s" * 43,
        "device_id": device_id,
    }


async def _send_raw(person: Any, room: str, content: dict[str, Any]) -> str:
    """Put ``content`` in the room as an ``m.room.encrypted`` event, as written (a client
    with encryption on would encrypt it once more)."""
    url = (
        f"{person.server.base_url}/_matrix/client/v3/rooms/{room}/send/m.room.encrypted/"
        f"{uuid.uuid4().hex}"
    )
    headers = {
        "Authorization": f"Bearer {person.account.access_token}",
        "Content-Type": "application/json",
    }
    request = urllib.request.Request(url, json.dumps(content).encode(), headers, method="PUT")

    def put() -> str:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return str(json.load(answer)["event_id"])

    return await asyncio.to_thread(put)


async def test_a_forged_device_id_is_no_link_and_a_stranger_is_not_told(
    gateway: Any,
    meet: Any,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    bob, mallory = await meet("bob", e2ee=True), await meet("mallory")
    bot = await synapse.register("bot")
    room = await bob.create_room([bot.user_id, mallory.user_id], encrypted=True)
    await mallory.join(room)
    config = matrix_config(
        tmp_path,
        target_repo,
        fake_api,
        synapse,
        bot,
        [bob.user_id],
        e2ee={"pickle_key": "a-test-pickle-key", "undecryptable_notice_s": 1},
    )
    gateway("run", "--config", str(config))
    await bob.wait_for(room, membership(bot.user_id, "join"), within=30)

    await _send_raw(mallory, room, _garbage(LINK))
    sent = await _send_raw(bob, room, _garbage(LINK))
    notice = await bob.wait_for(room, bot_text(bot.user_id, r"could not decrypt your message"))
    assert notice["content"]["m.relates_to"]["m.in_reply_to"]["event_id"] == sent
    shown = f"{notice['content']['body']}\n{notice['content'].get('formatted_body', '')}"
    assert "evil.test" not in shown, shown
    assert "from device unknown" in shown
    told = [
        e
        for e in await bob.history(room)
        if bot_text(bot.user_id, r"could not decrypt your message")(e)
    ]
    assert len(told) == 1, "the stranger's undecryptable message was answered"
