"""Cross-signing: after ``bootstrap-cross-signing`` made the bot account's keys and secret
storage, a bot started with the recovery key signs its own device, and another person's
client sees (through ``/keys/query``) that device signed by the bot's self-signing key,
itself signed by the bot's master key: what Element checks to show the bot as verified."""

from __future__ import annotations

import asyncio
import base64
import re
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gateway_bot.channels.matrix import MatrixAdapter
from gateway_bot.channels.matrix.cross_signing import canonical_json, decode_recovery_key
from gateway_bot.channels.matrix.session import MatrixSession
from gateway_bot.config.channels import MatrixChannelSettings
from gateway_bot.domain.messages import ChannelHealth, RawMessage
from gateway_bot.state.database import Database
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.synapse_fixtures import SynapseServer, matrix_config

pytestmark = pytest.mark.slow


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4))


def _signed_by(value: dict[str, Any], user_id: str, public: str) -> bool:
    """``value`` carries a valid signature of the Ed25519 key ``public`` (unpadded b64)."""
    signature = (value.get("signatures") or {}).get(user_id, {}).get(f"ed25519:{public}")
    if signature is None:
        return False
    body = {k: v for k, v in value.items() if k not in ("signatures", "unsigned")}
    Ed25519PublicKey.from_public_bytes(_unb64(public)).verify(
        _unb64(signature), canonical_json(body)
    )
    return True


async def _query_keys(synapse: SynapseServer, token: str, user_id: str) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{synapse.base_url}/_matrix/client/v3/keys/query",
            json={"device_keys": {user_id: []}},
            headers={"Authorization": f"Bearer {token}"},
        ) as answer,
    ):
        assert answer.status == 200
        result: dict[str, Any] = await answer.json()
        return result


async def _noop(raw: RawMessage) -> bool:
    return True


async def test_bot_started_with_a_recovery_key_is_cross_signed(
    meet, synapse: SynapseServer, tmp_path: Path, state_database: Database
) -> None:
    alice = await meet("alice")
    bot = await synapse.register("bot")
    settings = MatrixChannelSettings(
        homeserver=synapse.base_url,
        user_id=bot.user_id,
        password=bot.password,
        sync_timeout_seconds=1,
        e2ee={"pickle_key": "a-test-pickle-key"},
    )
    recovery_key = await MatrixSession(settings, tmp_path, state_database).bootstrap_cross_signing()
    assert len(decode_recovery_key(recovery_key)) == 32

    with_key = settings.model_copy(
        update={"e2ee": settings.e2ee.model_copy(update={"recovery_key": recovery_key})}
    )
    adapter = MatrixAdapter(with_key, tmp_path, state_database)
    await adapter.listener.start(_noop)
    try:
        deadline = time.monotonic() + 60
        while True:
            keys = await _query_keys(synapse, alice.account.access_token, bot.user_id)
            devices = keys["device_keys"].get(bot.user_id, {})
            master = next(iter(keys["master_keys"][bot.user_id]["keys"].values()))
            self_signing_key = keys["self_signing_keys"][bot.user_id]
            self_signing = next(iter(self_signing_key["keys"].values()))
            signed = [d for d in devices.values() if _signed_by(d, bot.user_id, self_signing)]
            if signed:
                break
            assert time.monotonic() < deadline, f"no device signed by {self_signing}: {devices}"
            await asyncio.sleep(0.5)
        assert _signed_by(self_signing_key, bot.user_id, master)
        assert len(signed) == 1
        # The device is signed while the listener starts; its first sync may come after.
        while adapter.listener.status.health is not ChannelHealth.CONNECTED:
            assert time.monotonic() < deadline, f"not connected: {adapter.listener.status}"
            await asyncio.sleep(0.2)
    finally:
        await adapter.listener.stop()

    # What `gateway-bot check` prints: the device, its fingerprint, and that it is signed.
    device = signed[0]
    device_id = device["device_id"]
    lines = await MatrixSession(with_key, tmp_path, state_database).describe_e2ee()
    fingerprint = device["keys"][f"ed25519:{device_id}"]
    assert lines[0] == f"matrix e2ee: available, device {device_id}, ed25519 {fingerprint}"
    assert lines[1] == "matrix cross-signing: device signed by the account's self-signing key"


async def test_the_cli_bootstraps_cross_signing_and_check_shows_the_device(
    gateway, synapse: SynapseServer, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic
) -> None:
    """As an owner does it: `matrix bootstrap-cross-signing` prints the recovery key once,
    then `check` names the bot's device and fingerprint to compare in a client."""
    bot = await synapse.register("bot")
    config = matrix_config(
        tmp_path, target_repo, fake_api, synapse, bot, [], e2ee={"pickle_key": "a-test-key"}
    )
    made = gateway("matrix", "bootstrap-cross-signing", "--config", str(config))
    assert made.wait(120) == 0, made.stderr
    assert len(decode_recovery_key(made.lines[-1])) == 32, made.lines
    checked = gateway("check", "--config", str(config))
    assert checked.wait(120) == 0, checked.stderr
    assert any(
        re.fullmatch(r"matrix e2ee: available, device \w+, ed25519 \S+", line)
        for line in checked.lines
    ), checked.lines
    assert "matrix cross-signing: no" in checked.lines, "no recovery key configured yet"
