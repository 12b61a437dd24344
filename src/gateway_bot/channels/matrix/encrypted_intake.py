"""Encrypted room events on their way in: decrypted and handed on as plain events, or kept
until their keys arrive.

A message whose Megolm session never reached the bot is kept (``undecrypted``, in the
state database) before the sync token moves past it, its keys are requested, its sender is
told once after ``e2ee.undecryptable_notice_s``, and it is handed on as soon as the keys
arrive (checked after every sync and every couple of seconds). ``stuck`` counts those past
the notice time, for the channel's health. A message from a device the trust policy does
not accept is logged and dropped.
"""

from __future__ import annotations

import asyncio
import html
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from nio import EncryptionError

from gateway_bot.channels.matrix.api import MatrixError
from gateway_bot.channels.matrix.crypto import Decrypted, KeysMissing
from gateway_bot.channels.matrix.events import EventKind, classify, user_allowed
from gateway_bot.channels.matrix.render import in_conversation, message_content
from gateway_bot.channels.matrix.session import MatrixSession

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]

_DEVICE_ID = re.compile(r"[A-Za-z0-9_.=+/-]{1,64}")
"""What a device id shown in a notice may look like (Synapse makes ``ABCDEFGHIJ``)."""


class EncryptedIntake:
    def __init__(
        self,
        session: MatrixSession,
        on_plain: Callable[[str, JsonDict], Awaitable[None]],
    ) -> None:
        """``on_plain``: what the listener does with a plain event of a room."""
        self._session = session
        self._on_plain = on_plain
        self._lock = asyncio.Lock()
        self.stuck = 0
        """Kept messages still undecryptable past the notice time."""
        self._maybe_undecrypted = True
        """False once the kept messages are known to be none: no database reads per tick."""

    async def on_encrypted(self, room_id: str, event: JsonDict) -> None:
        """Decrypt and handle as a plain event; keep it for later when keys are missing."""
        try:
            decrypted = await self._decrypt(room_id, event)
        except KeysMissing:
            log.info("matrix: no keys yet for %s in %s; keeping it", event.get("event_id"), room_id)
            await self._session.undecrypted.keep(room_id, event)
            self._maybe_undecrypted = True
            try:
                await self._session.e2ee.request_keys(room_id, event)
            except MatrixError as exc:
                log.warning("matrix: could not request keys for %s: %s", event["event_id"], exc)
            return
        except EncryptionError as exc:
            log.warning(
                "matrix: %s in %s cannot be decrypted: %s", event.get("event_id"), room_id, exc
            )
            return
        if not decrypted.trusted:
            log.warning(
                "matrix: ignoring %s from %s: device %s is not trusted (trust: %s)",
                event.get("event_id"),
                event.get("sender"),
                decrypted.device_id or "unknown",
                self._session.settings.e2ee.trust,
            )
            return
        if classify(decrypted.event, self._session.user_id) is EventKind.ENCRYPTED:
            return  # an encrypted event inside an encrypted event: nothing a client sends
        # The answer will be encrypted: share the room's key now, alongside the message's
        # commit and authentication, not on the acknowledgement's path.
        self._session.e2ee.prepare(room_id)
        await self._on_plain(room_id, decrypted.event)

    async def _decrypt(self, room_id: str, event: JsonDict) -> Decrypted:
        """A message from a device the bot has not seen yet is decrypted again after the
        device lists were queried (and the trust policy applied to the new device)."""
        decrypted = self._session.e2ee.decrypt(room_id, event)
        if decrypted.device_id is None:
            await self._session.e2ee.chores()
            decrypted = self._session.e2ee.decrypt(room_id, event)
        return decrypted

    async def keep_retrying(self) -> None:
        """Notices are due ``undecryptable_notice_s`` after a message arrived, whenever
        that falls between syncs."""
        interval = min(2.0, self._session.settings.e2ee.undecryptable_notice_s / 3)
        while True:
            await asyncio.sleep(interval)
            if not self._maybe_undecrypted or not self._session.logged_in:
                continue
            try:
                await self.retry_kept()
            except Exception:
                log.exception("matrix: retrying undecryptable messages failed")

    async def retry_kept(self) -> None:
        """Submit kept messages whose keys arrived; tell senders of those still missing
        theirs after the notice time, once."""
        if not self._session.e2ee.available:
            return
        session = self._session
        async with self._lock:
            stuck = 0
            notice_after = session.settings.e2ee.undecryptable_notice_s
            kept_messages = await session.undecrypted.pending()
            self._maybe_undecrypted = bool(kept_messages)
            for kept in kept_messages:
                if session.e2ee.megolm_session_known(kept.room_id, kept.event):
                    log.info("matrix: keys for %s arrived; handling it", kept.event_id)
                    await self.on_encrypted(kept.room_id, kept.event)
                    await session.undecrypted.forget(kept.event_id)
                    continue
                if time.time() - kept.received_at < notice_after:
                    continue
                sender = str(kept.event.get("sender", ""))
                if not user_allowed(sender, session.settings.allowed_users):
                    continue  # a stranger's: neither answered nor the channel's trouble
                stuck += 1
                if not kept.noticed:
                    await self._say_undecryptable(kept.room_id, kept.event)
                    await session.undecrypted.mark_noticed(kept.event_id)
            self.stuck = stuck

    async def _say_undecryptable(self, room_id: str, event: JsonDict) -> None:
        """Tell an allowed sender (only: a stranger's message, which the bot cannot even tell
        engages it, is neither answered nor counted as stuck), in plain text. The device id
        is a field of the unencrypted content that no homeserver checks: a "device" named
        ``[Verify the bot](https://evil)`` was a link in a message the bot posts."""
        sender = str(event.get("sender", ""))
        device = (event.get("content") or {}).get("device_id")
        if not isinstance(device, str) or not _DEVICE_ID.fullmatch(device):
            device = "unknown"
        text = (
            f"I could not decrypt your message from device {device} ({sender}): its keys "
            "never reached me. I asked your devices for them and will answer if they "
            "arrive; otherwise please send it again (and check that this device shares "
            "keys with unverified devices, or verify me)."
        )
        thread = (event.get("content") or {}).get("m.relates_to") or {}
        root = thread.get("event_id") if thread.get("rel_type") == "m.thread" else None
        plain = message_content(text, html.escape(text), "m.notice")
        content = in_conversation(plain, root, event.get("event_id"))
        await self._session.send_event(
            room_id, "m.room.message", content, f"gwb-undecryptable-{event.get('event_id')}"
        )
        log.warning("matrix: told %s that %s could not be decrypted", sender, event.get("event_id"))
