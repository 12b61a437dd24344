"""Megolm keys over time, with a human whose client is matrix-nio with its own crypto
store: a second device signed in later reads the bot's next reply; a rotated session
never stops the bot decrypting; a message whose key is withheld gets one clear notice,
does not stop later messages, marks the channel degraded while it stays unreadable, and is
answered when its key finally arrives."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway_bot.channels.matrix import MatrixAdapter
from gateway_bot.config.channels import MatrixChannelSettings
from gateway_bot.domain.messages import ChannelHealth, InboundMessage, RawMessage
from gateway_bot.state.database import Database
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.synapse_fixtures import (
    DECRYPTED,
    Human,
    SynapseServer,
    bot_text,
    matrix_config,
    membership,
    relation_of,
)

pytestmark = pytest.mark.slow


def _config(tmp_path, target_repo, fake_api, synapse, bot, alice, **e2ee):  # type: ignore[no-untyped-def]
    return matrix_config(
        tmp_path,
        target_repo,
        fake_api,
        synapse,
        bot,
        [alice.user_id],
        e2ee={"pickle_key": "a-test-pickle-key", **e2ee},
    )


async def test_second_device_reads_the_next_reply_and_rotation_keeps_working(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice = await meet("alice", e2ee=True)
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id], encrypted=True, direct=True)
    gateway("run", "--config", str(_config(tmp_path, target_repo, fake_api, synapse, bot, alice)))
    await alice.wait_for(room, membership(bot.user_id, "join"))
    await alice.say(room, "ONE before the second device")
    await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*ONE before"))

    phone = await alice.new_device(tmp_path / "phone-store")
    try:
        assert phone.device_id != alice.device_id
        # The bot shares a new room key with the phone as soon as it learns of the device,
        # before anyone writes: its next answer then only has to be encrypted.
        bot_devices = alice.client.device_store.active_user_devices(bot.user_id)
        bot_keys = {d.curve25519 for d in bot_devices}
        await _until_synced(
            phone, lambda: _holds_room_key(phone, room, bot_keys), "the bot's key ahead"
        )
        await alice.say(room, "TWO with a phone signed in")
        reply = await phone.wait_for(room, bot_text(bot.user_id, r"Echo: .*TWO with a phone"))
        assert reply.get(DECRYPTED), reply
    finally:
        await phone.close()

    # Alice's client rotates its Megolm session twice; the bot reads every message.
    sessions = {alice.rotate_megolm_session(room)}
    for word in ("THREE", "FOUR"):
        await alice.say(room, f"{word} after a rotation")
        echo = await alice.wait_for(room, bot_text(bot.user_id, rf"Echo: .*{word} after"))
        assert echo.get(DECRYPTED), echo
        sessions.add(alice.rotate_megolm_session(room))
    assert len(sessions - {None}) == 2, sessions


async def test_withheld_key_gets_one_notice_and_an_answer_when_it_arrives(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice = await meet("alice", e2ee=True)
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id], encrypted=True, direct=True)
    config = _config(tmp_path, target_repo, fake_api, synapse, bot, alice, undecryptable_notice_s=1)
    daemon = gateway("run", "--config", str(config))
    await alice.wait_for(room, membership(bot.user_id, "join"))

    withheld, deliver = await alice.say_keys_later(room, "LATE-KEY question")
    notice = await alice.wait_for(
        room,
        bot_text(bot.user_id, rf"could not decrypt your message from device {alice.device_id}"),
    )
    assert notice.get(DECRYPTED), notice
    assert notice["content"]["msgtype"] == "m.notice"

    await alice.say(room, "NEXT message works")
    await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*NEXT message works"))
    assert daemon.process.poll() is None, daemon.stderr

    await deliver()
    await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*LATE-KEY question"))
    history = await alice.history(room)
    notices = [e for e in history if bot_text(bot.user_id, r"could not decrypt your message")(e)]
    assert len(notices) == 1
    assert relation_of(notices[0])["m.in_reply_to"]["event_id"] == withheld


def _holds_room_key(person: Human, room: str, sender_keys: set[str]) -> bool:
    """The person's device holds a Megolm key for the room from one of ``sender_keys``."""
    olm = person.client.olm
    assert olm is not None
    return any(s.room_id == room and s.sender_key in sender_keys for s in olm.inbound_group_store)


async def _until_synced(person: Human, condition: Callable[[], bool], what: str) -> None:
    """Sync the person's client until ``condition`` holds (60 s at most)."""
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"waited 60 s for {what}"
        await person.sync()


async def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def test_undecryptable_messages_degrade_the_channel_until_their_keys_arrive(
    meet, synapse: SynapseServer, tmp_path: Path, state_database: Database
) -> None:
    alice = await meet("alice", e2ee=True)
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id], encrypted=True, direct=True)
    settings = MatrixChannelSettings(
        homeserver=synapse.base_url,
        user_id=bot.user_id,
        password=bot.password,
        allowed_users=[alice.user_id],
        sync_timeout_seconds=1,
        e2ee={"pickle_key": "a-test-pickle-key", "undecryptable_notice_s": 1},
    )
    adapter = MatrixAdapter(settings, tmp_path, state_database)
    heard: list[RawMessage] = []

    async def submit(raw: RawMessage) -> bool:
        heard.append(raw)
        return True

    await adapter.listener.start(submit)
    try:
        await alice.wait_for(room, membership(bot.user_id, "join"))
        said = await alice.say(room, "an ordinary encrypted message")
        await _until(lambda: any(r.message_id == said for r in heard), "never heard")
        assert adapter.listener.status.health is ChannelHealth.CONNECTED

        withheld, deliver = await alice.say_keys_later(room, "LATE-KEY question")
        await _until(
            lambda: adapter.listener.status.health is ChannelHealth.DEGRADED, "never degraded"
        )
        assert "cannot be decrypted" in adapter.listener.status.message
        assert not any(r.message_id == withheld for r in heard)

        await deliver()
        await _until(lambda: any(r.message_id == withheld for r in heard), "never handled")
        await _until(
            lambda: adapter.listener.status.health is ChannelHealth.CONNECTED, "never recovered"
        )
        parsed = await adapter.authenticate_and_parse(heard[-1])
        assert isinstance(parsed, InboundMessage)
        assert parsed.body == "LATE-KEY question"
        assert parsed.sender_id == alice.user_id
    finally:
        await adapter.listener.stop()


async def test_trust_verified_acts_only_on_devices_verified_out_of_band(
    meet, synapse: SynapseServer, tmp_path: Path, state_database: Database
) -> None:
    alice, bob = await meet("alice", e2ee=True), await meet("bob", e2ee=True)
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id, bob.user_id], encrypted=True)
    await bob.join(room)
    fingerprint = alice.client.olm.account.identity_keys["ed25519"]
    settings = MatrixChannelSettings(
        homeserver=synapse.base_url,
        user_id=bot.user_id,
        password=bot.password,
        allowed_users=[alice.user_id, bob.user_id],
        sync_timeout_seconds=1,
        e2ee={
            "pickle_key": "a-test-pickle-key",
            "trust": "verified",
            "verified_devices": [f"{alice.user_id} {alice.device_id} {fingerprint}"],
        },
    )
    adapter = MatrixAdapter(settings, tmp_path, state_database)
    heard: list[RawMessage] = []

    async def submit(raw: RawMessage) -> bool:
        heard.append(raw)
        return True

    await adapter.listener.start(submit)
    try:
        await alice.wait_for(room, membership(bot.user_id, "join"))
        from_bob = await bob.say(room, "BOB from an unverified device")
        from_alice = await alice.say(room, "ALICE from a verified device")
        await _until(lambda: any(r.message_id == from_alice for r in heard), "alice unheard")
        assert not any(r.message_id == from_bob for r in heard)
        reply = "the bot's answer"
        await adapter.send_rejection({"room_id": room}, reply)
        seen = await alice.wait_for(room, bot_text(bot.user_id, reply))
        assert seen.get(DECRYPTED), seen
        # The attack: bob's unverified device is in the room when the bot shares its key
        # (ahead of the answer, at alice's message) and must not be able to read it.
        on_bobs_screen = await bob.wait_for(room, lambda e: e.get("event_id") == seen["event_id"])
        assert not on_bobs_screen.get(DECRYPTED), on_bobs_screen
        assert on_bobs_screen.get("type") == "m.room.encrypted", on_bobs_screen
    finally:
        await adapter.listener.stop()
