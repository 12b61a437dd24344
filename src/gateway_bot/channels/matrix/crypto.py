"""End-to-end encryption for the Matrix channel, on matrix-nio's Olm machine (vodozemac).

nio keeps the account, the Olm and Megolm sessions and the device list in its SQLite store
under ``<state_dir>/matrix/crypto`` (encrypted with the configured pickle key), so a
restart, ``kill -9`` included, keeps the device and its keys. This module adds what the
channel needs around it:

* the key chores ``sync_forever`` would do (upload, query, claim, queued to-device
  messages): the channel runs its own sync loop for exactly-once intake;
* the trust policy (``matrix.e2ee.trust``): ``tofu`` verifies an allowed user's device when
  it is first seen and, since nio never replaces a known device's key, refuses a changed
  one; ``all`` trusts every device; ``verified`` only devices listed in
  ``e2ee.verified_devices`` with their Ed25519 key (all others are blacklisted: they get no
  room keys and their messages are not acted on);
* decrypting event JSON (sync timeline, /messages gaps, card events) and encrypting
  everything the bot sends, reactions included (nio leaves those plain);
* sharing a room's Megolm session ahead (``prepare``), so an acknowledgement's send only
  encrypts: the key claim and to-device round trips happen before the answer is ready;
* encrypted attachments both ways.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nio import AsyncClient, EncryptionError, LocalProtocolError, MegolmEvent
from nio.crypto import OlmDevice
from nio.crypto.attachments import decrypt_attachment, encrypt_attachment

from gateway_bot.channels.matrix.api import MatrixApi, MatrixError
from gateway_bot.channels.matrix.events import user_allowed
from gateway_bot.config.channels import MatrixE2eeSettings

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]

E2EE_KEY = "org.gateway_bot.e2ee"
"""Added to a decrypted event's JSON: which device sent it (the channel's own bookkeeping)."""


def crypto_dir(state_dir: Path) -> Path:
    return state_dir / "matrix" / "crypto"


def pickle_key(settings: MatrixE2eeSettings, state_dir: Path) -> str:
    """The configured key, else one generated once into the crypto directory (0600)."""
    if settings.pickle_key:
        return settings.pickle_key
    directory = crypto_dir(state_dir)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / "pickle-key"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    key = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(key)
    log.warning("matrix: no e2ee.pickle_key configured; generated one in %s", path)
    return key


def store_file(state_dir: Path, user_id: str, device_id: str) -> Path:
    """Where nio's default store keeps this device's keys."""
    return crypto_dir(state_dir) / f"{user_id}_{device_id}.db"


class KeysMissing(Exception):
    """No Megolm session for this event (yet): its keys were not shared with the bot."""


@dataclass(frozen=True)
class Decrypted:
    event: JsonDict
    """The decrypted event as JSON, shaped like a plain one (type, content, sender...)."""
    device_id: str | None
    trusted: bool
    """Sent by a device the trust policy accepts."""


class E2ee:
    def __init__(
        self,
        client: AsyncClient,
        api: MatrixApi,
        settings: MatrixE2eeSettings,
        allowed_users: list[str],
    ) -> None:
        self._client = client
        self._api = api
        self.settings = settings
        self._allowed = allowed_users
        self._seen: set[tuple[str, str]] = set()
        self._active_rooms: set[str] = set()
        """Encrypted rooms the bot talked in (this process): their sessions are shared
        ahead again when a device change ends them."""
        self._sharing: set[asyncio.Task[None]] = set()

    @property
    def available(self) -> bool:
        return self._client.olm is not None

    def room_encrypted(self, room_id: str) -> bool | None:
        """Whether nio knows the room as encrypted; None when it does not know the room."""
        room = self._client.rooms.get(room_id)
        if room is not None:
            return bool(room.encrypted)
        return True if room_id in self._client.encrypted_rooms else None

    # -- key chores and trust ----------------------------------------------------------

    async def chores(self) -> None:
        """Upload our keys, query changed devices, claim one-time keys, send queued
        to-device messages; then apply the trust policy to newly seen devices."""
        client, api = self._client, self._api
        if client.olm is None:
            return
        if client.should_upload_keys:
            await api._nio(client.keys_upload(), "keys upload")
        if client.should_query_keys:
            await api._nio(client.keys_query(), "keys query")
        if client.should_claim_keys:
            await api._nio(client.keys_claim(client.get_users_for_key_claiming()), "keys claim")
        for answer in await client.send_to_device_messages():
            if not hasattr(answer, "to_device_message"):
                log.warning("matrix: a to-device message was not sent: %s", answer)
        self.apply_trust()
        for room_id in list(self._active_rooms):
            self.prepare(room_id)

    def apply_trust(self) -> None:
        olm = self._client.olm
        if olm is None:
            return
        for user_id in list(olm.device_store.users):
            for device in olm.device_store.active_user_devices(user_id):
                self._decide(device)

    def _decide(self, device: OlmDevice) -> None:
        """Apply the policy to a device; a device seen for the first time (in this process)
        ends the rooms' outbound sessions it shares, so it gets keys for the next message
        (nio shares a session once, with the devices known then)."""
        key = (device.user_id, device.id)
        if key not in self._seen:
            self._seen.add(key)
            for room in self._client.rooms.values():
                if device.user_id in room.users:
                    self._client.invalidate_outbound_session(room.room_id)
        if self._verified_out_of_band(device):
            if device.blacklisted:
                self._client.unblacklist_device(device)
            if not device.verified:
                self._client.verify_device(device)
                log.info("matrix: %s's device %s verified by the config", device.user_id, device.id)
            return
        trust = self.settings.trust
        if trust == "verified" and device.verified:
            self._client.unverify_device(device)  # trusted under an earlier policy only
        if device.verified or device.blacklisted:
            return
        if trust == "tofu" and user_allowed(device.user_id, self._allowed):
            self._client.verify_device(device)
            log.info(
                "matrix: trusting %s's device %s on first sight (ed25519 %s)",
                device.user_id,
                device.id,
                device.ed25519,
            )
        elif trust == "verified":
            self._client.blacklist_device(device)
            log.info(
                "matrix: %s's device %s is not verified: no keys for it", device.user_id, device.id
            )

    def _verified_out_of_band(self, device: OlmDevice) -> bool:
        entry = f"{device.user_id} {device.id} {device.ed25519}"
        return any(" ".join(v.split()) == entry for v in self.settings.verified_devices)

    # -- decrypting --------------------------------------------------------------------

    def decrypt(self, room_id: str, event: JsonDict) -> Decrypted:
        """The plaintext of an ``m.room.encrypted`` room event. Raises KeysMissing when the
        bot holds no session for it, EncryptionError when it is broken or replayed."""
        olm = self._client.olm
        if olm is None:
            raise KeysMissing("encryption is not available")
        parsed = MegolmEvent.from_dict({**event, "room_id": room_id})
        if not isinstance(parsed, MegolmEvent):
            raise EncryptionError(f"not a Megolm event: {type(parsed).__name__}")
        if olm.inbound_group_store.get(room_id, parsed.sender_key, parsed.session_id) is None:
            raise KeysMissing(parsed.session_id)
        plain = olm.decrypt_megolm_event(parsed, room_id)
        source = dict(getattr(plain, "source", {}) or {})
        if not source.get("type"):
            raise EncryptionError("the decrypted payload is not an event")
        device = self._device_of(parsed.sender, parsed.sender_key)
        source.update(
            room_id=room_id,
            unsigned=event.get("unsigned") or {},
            **{E2EE_KEY: {"device_id": device.id if device else parsed.device_id}},
        )
        return Decrypted(source, device.id if device else None, self._trusted(device))

    def _device_of(self, user_id: str, sender_key: str) -> OlmDevice | None:
        olm = self._client.olm
        assert olm is not None
        for device in olm.device_store.active_user_devices(user_id):
            if device.curve25519 == sender_key:
                return device
        return None

    def _trusted(self, device: OlmDevice | None) -> bool:
        """Unknown devices (a changed key included: nio keeps the first one) are never
        trusted; ``all`` takes any known device, the others what the policy verified."""
        if device is None or device.blacklisted:
            return False
        return (
            self.settings.trust == "all"
            or device.verified
            or (self.settings.trust == "tofu" and not user_allowed(device.user_id, self._allowed))
        )

    def megolm_session_known(self, room_id: str, event: JsonDict) -> bool:
        content = event.get("content") or {}
        olm = self._client.olm
        return (
            olm is not None
            and olm.inbound_group_store.get(
                room_id, str(content.get("sender_key", "")), str(content.get("session_id", ""))
            )
            is not None
        )

    async def request_keys(self, room_id: str, event: JsonDict) -> None:
        """Ask the sender's devices (and our own) for the session; once per session."""
        parsed = MegolmEvent.from_dict({**event, "room_id": room_id})
        if not isinstance(parsed, MegolmEvent):
            return
        with contextlib.suppress(LocalProtocolError):  # already asked for this session
            await self._api._nio(self._client.request_room_key(parsed), "room key request")

    # -- encrypting --------------------------------------------------------------------

    async def send(self, room_id: str, event_type: str, content: JsonDict, txn_id: str) -> str:
        """Encrypt for the room's devices the policy allows, and send. Device lists are
        brought up to date first, so a member's new device gets keys for this message.
        Usually the room's session was shared ahead (``prepare``): this only encrypts."""
        await self._ensure_shared(room_id)
        encrypted_type, encrypted = self._client.encrypt(room_id, event_type, content)
        event_id = await self._api.send_raw(room_id, encrypted_type, encrypted, txn_id)
        self.prepare(room_id)  # this message may have used the session up: rotate now
        return event_id

    def prepare(self, room_id: str) -> None:
        """Share the room's Megolm session now, in the background, if the next send would
        have to (no session yet, used up, or ended because a device appeared), so that an
        acknowledgement's send only encrypts. Called when a message arrives in an
        encrypted room, after each send and after device changes; a failure is logged and
        the next send shares itself. The same trust policy applies as on a send."""
        client, olm = self._client, self._client.olm
        room = client.rooms.get(room_id)
        if olm is None or room is None or not room.encrypted:
            return
        self._active_rooms.add(room_id)
        if room_id in client.sharing_session or not olm.should_share_group_session(room_id):
            return
        task = asyncio.create_task(self._share_ahead(room_id), name=f"matrix-share-{room_id}")
        self._sharing.add(task)
        task.add_done_callback(self._sharing.discard)

    async def _share_ahead(self, room_id: str) -> None:
        try:
            await self._ensure_shared(room_id)
        except Exception as exc:  # the send path shares (and reports) itself
            log.warning("matrix: sharing %s's room key ahead failed: %s", room_id, exc)

    async def _ensure_shared(self, room_id: str) -> None:
        """The room's members and their devices known, the policy applied, and a Megolm
        session shared with the devices it allows (waiting for a share under way)."""
        client, api = self._client, self._api
        room = client.rooms.get(room_id)
        if room is None:
            raise MatrixError(0, "M_ROOM_UNKNOWN", f"{room_id} is not synced yet")
        if not room.members_synced:
            await api._nio(client.joined_members(room_id), "joined members")
        if client.should_query_keys:
            await api._nio(client.keys_query(), "keys query")
        self.apply_trust()
        olm = client.olm
        assert olm is not None
        ended = 0
        while olm.should_share_group_session(room_id):
            sharing = client.sharing_session.get(room_id)
            if sharing is not None:
                await sharing.wait()  # shared by another task, or failed: check again
                continue
            ignore = self.settings.trust != "verified"
            try:
                await api._nio(
                    client.share_group_session(room_id, ignore_unverified_devices=ignore),
                    "share room key",
                )
            except KeyError:
                # A device appeared during the share and ended the session (``_decide``):
                # nio then fails marking it shared. Share the new one (a few times).
                ended += 1
                if ended >= 3:
                    raise
                continue
            except BaseException:
                # nio leaves its "sharing" mark behind when the key claim fails: clear it,
                # or every later send to the room would wait on it forever.
                stale = client.sharing_session.pop(room_id, None)
                if stale is not None:
                    stale.set()
                raise

    # -- attachments -------------------------------------------------------------------

    @staticmethod
    def encrypt_file(data: bytes) -> tuple[bytes, JsonDict]:
        """(ciphertext, the ``file`` object without its url)."""
        ciphertext, keys = encrypt_attachment(data)
        return ciphertext, dict(keys)

    @staticmethod
    def decrypt_file(ciphertext: bytes, file_info: JsonDict) -> bytes:
        """Check the hash, then decrypt. Raises EncryptionError on any mismatch."""
        try:
            key = str(file_info["key"]["k"])
            digest = str(file_info["hashes"]["sha256"])
            iv = str(file_info["iv"])
        except (KeyError, TypeError) as exc:
            raise EncryptionError(f"incomplete encrypted file info: {exc}") from exc
        return bytes(decrypt_attachment(ciphertext, key, digest, iv))

    # -- what an owner checks ----------------------------------------------------------

    def fingerprint(self) -> str | None:
        olm = self._client.olm
        return None if olm is None else str(olm.account.identity_keys["ed25519"])
