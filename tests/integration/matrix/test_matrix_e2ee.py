"""A person talks to the bot in an encrypted DM created the way Element creates one
(``m.room.encryption`` in the initial state, a trusted private chat flagged direct). Their
client is matrix-nio with its own crypto store: everything the bot sends must arrive
encrypted and decrypt there; files go both ways as encrypted attachments."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fake_anthropic import FakeAnthropic
from tests.support.synapse_fixtures import (
    DECRYPTED,
    SynapseServer,
    bot_edit,
    bot_text,
    matrix_config,
    membership,
    relation_of,
)

pytestmark = pytest.mark.slow


async def test_encrypted_dm_gets_encrypted_ack_progress_reply_and_files(
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
    config = matrix_config(
        tmp_path,
        target_repo,
        fake_api,
        synapse,
        bot,
        [alice.user_id],
        e2ee={"pickle_key": "a-test-pickle-key"},
    )
    daemon = gateway("run", "--config", str(config))
    try:
        await alice.wait_for(room, membership(bot.user_id, "join"), within=30)
    except AssertionError:
        print("DAEMON STDERR", daemon.stderr)
        raise

    asked = await alice.say(room, "SECRET-QUESTION please answer")
    ack = await alice.wait_for(room, bot_text(bot.user_id, r"^Working on it…$"))
    assert ack.get(DECRYPTED), ack
    assert relation_of(ack)["m.in_reply_to"]["event_id"] == asked
    reply = await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*SECRET-QUESTION"))
    assert reply.get(DECRYPTED), reply
    assert reply["content"]["format"] == "org.matrix.custom.html"
    done = await alice.wait_for(room, bot_edit(bot.user_id, ack["event_id"], r"^Done"))
    assert done.get(DECRYPTED), done

    # Nothing the bot sent went out in the clear, and the homeserver saw no plaintext.
    history = await alice.history(room)
    from_bot = [e for e in history if e.get("sender") == bot.user_id]
    readable = [e for e in from_bot if e.get("type") in ("m.room.message", "m.reaction")]
    assert readable, from_bot
    assert all(e.get(DECRYPTED) for e in readable), readable
    asked_text = " ".join(fake_api.user_texts(fake_api.requests[-1]))
    assert "SECRET-QUESTION" in asked_text

    # A file in (encrypted attachment, decrypted into the inbox) and a file out.
    await alice.send_encrypted_file(
        room,
        "notes.txt",
        b"the secret notes",
        caption="WRITE_FILE name=../outbox/report.txt text=REPORT-BODY",
    )
    await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*WRITE_FILE"))
    told = " ".join(fake_api.user_texts(fake_api.requests[-1]))
    assert "/inbox/notes.txt]" in told
    saved = list((tmp_path / "state" / "conversations").glob("*/inbox/notes.txt"))
    assert [p.read_bytes() for p in saved] == [b"the secret notes"]
    sent = await alice.wait_for(
        room,
        lambda e: (
            e.get("sender") == bot.user_id and (e.get("content") or {}).get("msgtype") == "m.file"
        ),
    )
    assert sent.get(DECRYPTED), sent
    assert "url" not in sent["content"], sent["content"]
    assert await alice.download_encrypted(sent["content"]["file"]) == b"REPORT-BODY"
    assert await alice.download(sent["content"]["file"]["url"]) != b"REPORT-BODY"
    assert daemon.process.poll() is None, daemon.stderr


def _reaction(event_id: str, key: str) -> dict[str, object]:
    return {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}


async def test_card_in_encrypted_room_counts_the_owners_reaction_only(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice = await meet("alice", e2ee=True)
    mallory = await meet("mallory", e2ee=True)
    eve = await meet("eve", e2ee=True)
    bot = await synapse.register("bot")
    desk = await alice.create_room([bot.user_id, eve.user_id], name="Owner desk", encrypted=True)
    await eve.join(desk)
    team = await alice.create_room([bot.user_id, mallory.user_id], name="Team", encrypted=True)
    await mallory.join(team)
    access = {
        "owners": {"matrix": [alice.user_id]},
        "approval_destination": {"channel": "matrix", "context": {"room_id": desk}},
    }
    config = matrix_config(
        tmp_path, target_repo, fake_api, synapse, bot, [alice.user_id], sections={"access": access}
    )
    gateway("run", "--config", str(config))
    await alice.wait_for(team, membership(bot.user_id, "join"))
    await alice.wait_for(desk, membership(bot.user_id, "join"))

    await mallory.say(team, "MALLORY-REQUEST please run", mention=bot.user_id)
    card = await alice.wait_for(desk, bot_text(bot.user_id, r"Unknown sender in Team"))
    assert card.get(DECRYPTED), card
    assert "MALLORY-REQUEST" in card["content"]["body"]

    # Eve is in the desk room but no owner: her encrypted ✅ decides nothing.
    await eve.wait_for(desk, bot_text(bot.user_id, r"Unknown sender in Team"))
    await eve.react_encrypted(desk, card["event_id"], "✅")
    # Alice's (encrypted, as Element sends it) does.
    await alice.react_encrypted(desk, card["event_id"], "✅")
    await mallory.wait_for(team, bot_text(bot.user_id, r"Echo: .*MALLORY-REQUEST"))
    decided = await alice.wait_for(desk, bot_edit(bot.user_id, card["event_id"], r"Allowed"))
    assert decided.get(DECRYPTED), decided
    body = decided["content"]["m.new_content"]["body"]
    assert alice.user_id.split(":")[0][1:] in body, body
    assert eve.user_id.split(":")[0][1:] not in body, body
    echoes = [e for e in await mallory.history(team) if bot_text(bot.user_id, r"Echo: ")(e)]
    assert len(echoes) == 1


async def _bot_devices(synapse: SynapseServer, token: str) -> list[str]:
    import aiohttp

    async with (
        aiohttp.ClientSession() as session,
        session.get(
            f"{synapse.base_url}/_matrix/client/v3/devices",
            headers={"Authorization": f"Bearer {token}"},
        ) as answer,
    ):
        devices = (await answer.json())["devices"]
    return sorted(d["device_id"] for d in devices if d.get("display_name") == "gateway-bot")


async def test_kill_9_mid_task_keeps_the_device_and_still_decrypts(
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
    config = matrix_config(
        tmp_path,
        target_repo,
        fake_api,
        synapse,
        bot,
        [alice.user_id],
        e2ee={"pickle_key": "a-test-pickle-key"},
    )
    first = gateway("run", "--config", str(config))
    await alice.wait_for(room, membership(bot.user_id, "join"))
    await alice.say(room, "FIRST encrypted")
    await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*FIRST encrypted"))
    devices = await _bot_devices(synapse, bot.access_token)
    assert len(devices) == 1, devices

    fake_api.hold("SECOND")
    await alice.say(room, "SECOND encrypted")
    assert fake_api.wait_for_held(60), "the agent never started on SECOND"
    first.kill()
    await alice.say(room, "THIRD encrypted, sent while the bot was down")
    fake_api.release()

    gateway("run", "--config", str(config))
    await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*SECOND encrypted"))
    await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*THIRD encrypted"))
    await alice.say(room, "FOURTH encrypted, after the restart")
    fourth = await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*FOURTH encrypted"))
    assert fourth.get(DECRYPTED), fourth

    assert await _bot_devices(synapse, bot.access_token) == devices
    history = await alice.history(room)
    for word in ("FIRST", "SECOND", "THIRD", "FOURTH"):
        echoes = [e for e in history if bot_text(bot.user_id, rf"Echo: .*{word} encrypted")(e)]
        assert len(echoes) == 1, f"{word}: {len(echoes)} replies"
        assert echoes[0].get(DECRYPTED), echoes[0]
