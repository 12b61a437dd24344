"""The bot's logged-in account, shared by the listener (which logs in) and the adapter
(which waits for it: after a restart the core may ask the adapter to parse or answer before
the first sync).

With a password the bot logs in once and keeps the device id and access token in its state
file: one device for the bot's whole life, so the homeserver's transaction-id
de-duplication (scoped to the device) still recognises a reply re-sent after a crash, and
the crypto store (keyed by the device) keeps decrypting. A stored login whose crypto store
is gone while the homeserver still holds that device's keys cannot be reused (nio would
fail to upload keys for it forever): the bot then logs in as a new device.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from nio import EncryptionError
from nio.crypto import ENCRYPTION_ENABLED

from gateway_bot.channels.matrix.api import MatrixApi, MatrixError, new_client
from gateway_bot.channels.matrix.cross_signing import (
    CrossSigningError,
    bootstrap,
    sign_own_device,
)
from gateway_bot.channels.matrix.crypto import (
    E2ee,
    KeysMissing,
    crypto_dir,
    pickle_key,
    store_file,
)
from gateway_bot.channels.matrix.sends import SendsInFlight
from gateway_bot.channels.matrix.store import MatrixStateStore
from gateway_bot.channels.matrix.undecrypted import UndecryptedStore
from gateway_bot.config.channels import MatrixChannelSettings
from gateway_bot.state.database import Database

log = logging.getLogger(__name__)

_CLIENT = "/_matrix/client/v3"

T = TypeVar("T")

JsonDict = dict[str, Any]


class LoginRefused(Exception):
    """The credentials are wrong: retrying will not help, an operator must fix the config."""


class MatrixSession:
    def __init__(
        self, settings: MatrixChannelSettings, state_dir: Path, database: Database
    ) -> None:
        self.settings = settings
        self.state_dir = state_dir
        e2ee = settings.e2ee
        store_path = ""
        key = ""
        if e2ee.enabled:
            store_path = str(crypto_dir(state_dir))
            key = pickle_key(e2ee, state_dir)
        self.client = new_client(settings.homeserver, settings.user_id, store_path, key)
        self.api = MatrixApi(self.client)
        self.e2ee = E2ee(self.client, self.api, e2ee, settings.allowed_users)
        self.store = MatrixStateStore(database, legacy_path=state_dir / "matrix" / "matrix.db")
        self.undecrypted = UndecryptedStore(database)
        self.user_id = settings.user_id
        self.sends = SendsInFlight()
        self.device_id: str | None = None
        self.display_name: str | None = None
        self._ready = asyncio.Event()
        self._synced = asyncio.Event()
        self.cross_signing: str | None = None
        """None until tried; then whether this device is cross-signed, in words."""

    @property
    def logged_in(self) -> bool:
        return self._ready.is_set()

    async def ready(self) -> None:
        """Logged in and the first sync of this process handled (nio knows the rooms,
        which encrypted sends need)."""
        await self._ready.wait()
        await self._synced.wait()

    async def when_ready(self, call: Callable[[], Awaitable[T]]) -> T:
        """Wait for the login, then make one attempt. Retrying is the core's (one policy,
        ``core/retries.py``, outside its intake lock): a MatrixError says whether it is
        ``transient``. Sends carry transaction ids, so the core's retry never posts twice."""
        await self.ready()
        return await call()

    def mark_synced(self) -> None:
        self._synced.set()

    def bot_names(self) -> tuple[str, ...]:
        """Names a human uses to mention the bot: its display name and its localpart."""
        localpart = self.user_id[1:].split(":", 1)[0]
        return tuple(n for n in (self.display_name, localpart) if n)

    async def log_in(self) -> None:
        """Use the configured access token, the stored login, or log in with the password
        (then store it). Raises LoginRefused for bad credentials, MatrixError otherwise."""
        settings = self.settings
        if settings.e2ee.enabled:  # nio opens its store right after a login: have its dir
            directory = crypto_dir(self.state_dir)
            await asyncio.to_thread(directory.mkdir, mode=0o700, parents=True, exist_ok=True)
        if settings.access_token is not None:
            self.device_id = await self._check_token(
                settings.access_token, "the configured access_token"
            )
            await self._restore(settings.access_token)
        elif not await self._use_stored_login():
            await self._password_login()
        try:
            self.display_name = await self.api.display_name(self.user_id)
        except MatrixError as exc:
            log.warning("matrix: could not read the bot's display name: %s", exc)
        if self.settings.e2ee.enabled and not self.e2ee.available:
            log.warning("matrix: end-to-end encryption is off (no device id or no store)")
        self._ready.set()

    async def _password_login(self) -> None:
        settings = self.settings
        assert settings.password is not None
        try:
            login = await self.api.login_password(
                settings.user_id, settings.password, settings.device_name
            )
        except MatrixError as exc:
            if exc.status in (400, 401, 403):
                raise LoginRefused(f"password login as {settings.user_id}: {exc}") from exc
            raise
        if login.user_id != settings.user_id:
            raise LoginRefused(f"logged in as {login.user_id}, not {settings.user_id}")
        self.device_id = login.device_id
        await self.store.save_login(
            settings.homeserver, login.user_id, login.device_id, login.access_token
        )
        log.info("matrix: logged in as %s, new device %s", login.user_id, login.device_id)

    async def _restore(self, access_token: str) -> None:
        """Hand the login to nio, which opens this device's crypto store."""
        if self.device_id is None:
            self.client.access_token = access_token
            return
        self.client.restore_login(self.user_id, self.device_id, access_token)

    async def _use_stored_login(self) -> bool:
        stored = await self.store.load_login(self.settings.homeserver, self.user_id)
        if stored is None:
            return False
        _device_id, token = stored
        try:
            self.device_id = await self._check_token(token, "the stored access token")
        except LoginRefused as exc:
            log.warning("matrix: %s; logging in again with the password", exc)
            await self.store.forget_login(self.settings.homeserver, self.user_id)
            return False
        if self.settings.e2ee.enabled and self.device_id and await self._crypto_store_lost(token):
            log.error(
                "matrix: the crypto store of device %s is gone but the homeserver still has "
                "its keys; logging in as a new device",
                self.device_id,
            )
            await self.store.forget_login(self.settings.homeserver, self.user_id)
            return False
        await self._restore(token)
        log.info("matrix: resumed the login of %s, device %s", self.user_id, self.device_id)
        return True

    async def _crypto_store_lost(self, token: str) -> bool:
        assert self.device_id is not None
        path = store_file(self.state_dir, self.user_id, self.device_id)
        if await asyncio.to_thread(path.exists):
            return False
        self.client.access_token = token
        answer = await self.api.call(
            "POST",
            f"{_CLIENT}/keys/query",
            body={"device_keys": {self.user_id: [self.device_id]}},
        )
        devices = (answer.get("device_keys") or {}).get(self.user_id) or {}
        return self.device_id in devices

    async def _check_token(self, token: str, what: str) -> str | None:
        try:
            user_id, device_id = await self.api.whoami(token)
        except MatrixError as exc:
            if exc.status == 401:
                raise LoginRefused(f"{what} was rejected: {exc}") from exc
            raise
        if user_id != self.user_id:
            raise LoginRefused(f"{what} belongs to {user_id}, not {self.user_id}")
        return device_id

    async def send_event(
        self,
        room_id: str,
        event_type: str,
        content: JsonDict,
        txn_id: str,
        *,
        acknowledgement: bool = False,
    ) -> str:
        """Send into a room, encrypted when the room is. A room nio does not know yet (just
        joined, not synced) is asked of the homeserver: an encrypted one waits for the
        sync (a transient error, retried), never gets plaintext. ``acknowledgement``: a
        task's (``sends.py``: the listener's grace follows those)."""
        encrypted = self.e2ee.room_encrypted(room_id) if self.e2ee.available else False
        if encrypted is None:
            if await self.api.state_event(room_id, "m.room.encryption"):
                raise MatrixError(0, "M_ROOM_UNKNOWN", f"{room_id} is not synced yet")
            encrypted = False
        async with self.sends.sending(acknowledgement=acknowledgement):
            if encrypted:
                return await self.e2ee.send(room_id, event_type, content, txn_id)
            return await self.api.send_raw(room_id, event_type, content, txn_id)

    async def read_event(self, room_id: str, event_id: str) -> JsonDict:
        """One event as JSON, decrypted when it is encrypted, with its bundled latest edit
        (``unsigned.m.relations.m.replace``) decrypted too."""
        event = await self.api.get_event(room_id, event_id)
        if event.get("type") != "m.room.encrypted" or not self.e2ee.available:
            return event
        try:
            plain = self.e2ee.decrypt(room_id, event).event
            relations = (plain.get("unsigned") or {}).get("m.relations") or {}
            edit = relations.get("m.replace") if isinstance(relations, dict) else None
            if isinstance(edit, dict) and edit.get("type") == "m.room.encrypted":
                relations["m.replace"] = self.e2ee.decrypt(room_id, edit).event
        except (KeysMissing, EncryptionError) as exc:
            raise MatrixError(403, "M_UNDECRYPTABLE", f"{event_id}: {exc}") from exc
        return plain

    async def cross_sign(self) -> None:
        """With ``e2ee.recovery_key``, sign this device with the account's self-signing key
        from secret storage, once per process (after our device keys are uploaded). A
        refusal is logged and shown by ``cross_signing``; transport errors propagate and
        the next sync tries again."""
        key = self.settings.e2ee.recovery_key
        if self.cross_signing is not None or not key or not self.e2ee.available:
            return
        assert self.device_id is not None
        try:
            signed = await sign_own_device(self.api, self.user_id, self.device_id, key)
        except CrossSigningError as exc:
            log.error("matrix: cannot cross-sign device %s: %s", self.device_id, exc)
            self.cross_signing = f"not cross-signed: {exc}"
            return
        self.cross_signing = "cross-signed by the account's self-signing key"
        if signed:
            log.info("matrix: device %s is now cross-signed", self.device_id)

    async def describe_e2ee(self) -> list[str]:
        """What ``gateway-bot check`` prints about encryption: available or not, the bot's
        device id, its Ed25519 fingerprint (to compare in a client's session list) and
        whether it is cross-signed. Never logs in anew: no device is made by a check."""
        if not self.settings.e2ee.enabled:
            return ["matrix e2ee: off (matrix.e2ee.enabled is false)"]
        if not ENCRYPTION_ENABLED:
            return ["matrix e2ee: unavailable (matrix-nio's e2e extra is not installed)"]
        token = self.settings.access_token
        if token is None:
            stored = await self.store.load_login(self.settings.homeserver, self.user_id)
            if stored is None:
                return ["matrix e2ee: available; the bot's device is made at its first run"]
            token = stored[1]
        self.device_id = await self._check_token(token, "the access token")
        await asyncio.to_thread(crypto_dir(self.state_dir).mkdir, parents=True, exist_ok=True)
        await self._restore(token)
        try:
            fingerprint = self.e2ee.fingerprint()
            answer = await self.api.call(
                "POST",
                f"{_CLIENT}/keys/query",
                body={"device_keys": {self.user_id: [str(self.device_id)]}},
            )
        finally:
            await self.api.retire()
        self_signing = (answer.get("self_signing_keys") or {}).get(self.user_id) or {}
        device = ((answer.get("device_keys") or {}).get(self.user_id) or {}).get(
            str(self.device_id)
        ) or {}
        signed_by = set((device.get("signatures") or {}).get(self.user_id, {}))
        cross_signed = bool(signed_by & set(self_signing.get("keys") or {}))
        return [
            f"matrix e2ee: available, device {self.device_id}, ed25519 {fingerprint}",
            "matrix cross-signing: "
            + ("device signed by the account's self-signing key" if cross_signed else "no")
            + ("" if self_signing else " (the account has no cross-signing keys)"),
        ]

    async def bootstrap_cross_signing(self) -> str:
        """Log in, make new cross-signing keys and secret storage; the recovery key (for
        ``e2ee.recovery_key``). Replaces any cross-signing identity the account had."""
        if not self.logged_in:
            await self.log_in()
        try:
            return await bootstrap(self.api, self.user_id, self.settings.password)
        finally:
            await self.api.retire()

    async def token_lost(self) -> None:
        """The homeserver no longer accepts our token (logged out elsewhere). With a
        password, forget it so the next log_in makes a new login; without, give up."""
        self._ready.clear()
        if self.settings.password is None:
            raise LoginRefused("the access token was rejected (M_UNKNOWN_TOKEN)")
        await self.store.forget_login(self.settings.homeserver, self.user_id)
        self.client.access_token = ""
        # nio opens a store only when none is open: the new device needs its own.
        self.client.store = None
        self.client.olm = None
