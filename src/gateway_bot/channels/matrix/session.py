"""The bot's logged-in account, shared by the listener (which logs in) and the adapter
(which waits for it: after a restart the core may ask the adapter to parse or answer before
the first sync).

With a password the bot logs in once and keeps the device id and access token in its state
file: one device for the bot's whole life, and the homeserver's transaction-id
de-duplication (scoped to the device) still recognises a reply re-sent after a crash.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from gateway_bot.channels.matrix.api import MatrixApi, MatrixError
from gateway_bot.channels.matrix.store import MatrixStateStore
from gateway_bot.config.channels import MatrixChannelSettings

log = logging.getLogger(__name__)


class LoginRefused(Exception):
    """The credentials are wrong: retrying will not help, an operator must fix the config."""


class MatrixSession:
    def __init__(self, settings: MatrixChannelSettings, state_dir: Path) -> None:
        self.settings = settings
        self.api = MatrixApi(settings.homeserver)
        self.store = MatrixStateStore(state_dir / "matrix" / "matrix.db")
        self.user_id = settings.user_id
        self.device_id: str | None = None
        self.display_name: str | None = None
        self._ready = asyncio.Event()

    @property
    def logged_in(self) -> bool:
        return self._ready.is_set()

    async def ready(self) -> None:
        await self._ready.wait()

    def bot_names(self) -> tuple[str, ...]:
        """Names a human uses to mention the bot: its display name and its localpart."""
        localpart = self.user_id[1:].split(":", 1)[0]
        return tuple(n for n in (self.display_name, localpart) if n)

    async def log_in(self) -> None:
        """Use the configured access token, the stored login, or log in with the password
        (then store it). Raises LoginRefused for bad credentials, MatrixError otherwise."""
        settings = self.settings
        if settings.access_token is not None:
            self.api.access_token = settings.access_token
            self.device_id = await self._check_token("the configured access_token")
        elif not await self._use_stored_login():
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
            self.api.access_token = login.access_token
            self.device_id = login.device_id
            await self.store.save_login(
                settings.homeserver, login.user_id, login.device_id, login.access_token
            )
            log.info("matrix: logged in as %s, new device %s", login.user_id, login.device_id)
        try:
            self.display_name = await self.api.display_name(self.user_id)
        except MatrixError as exc:
            log.warning("matrix: could not read the bot's display name: %s", exc)
        self._ready.set()

    async def _use_stored_login(self) -> bool:
        stored = await self.store.load_login(self.settings.homeserver, self.user_id)
        if stored is None:
            return False
        self.api.access_token = stored[1]
        try:
            self.device_id = await self._check_token("the stored access token")
        except LoginRefused as exc:
            log.warning("matrix: %s; logging in again with the password", exc)
            await self.store.forget_login(self.settings.homeserver, self.user_id)
            self.api.access_token = None
            return False
        log.info("matrix: resumed the login of %s, device %s", self.user_id, self.device_id)
        return True

    async def _check_token(self, what: str) -> str | None:
        try:
            user_id, device_id = await self.api.whoami()
        except MatrixError as exc:
            if exc.status == 401:
                raise LoginRefused(f"{what} was rejected: {exc}") from exc
            raise
        if user_id != self.user_id:
            raise LoginRefused(f"{what} belongs to {user_id}, not {self.user_id}")
        return device_id

    async def token_lost(self) -> None:
        """The homeserver no longer accepts our token (logged out elsewhere). With a
        password, forget it so the next log_in makes a new login; without, give up."""
        self._ready.clear()
        if self.settings.password is None:
            raise LoginRefused("the access token was rejected (M_UNKNOWN_TOKEN)")
        await self.store.forget_login(self.settings.homeserver, self.user_id)
        self.api.access_token = None
