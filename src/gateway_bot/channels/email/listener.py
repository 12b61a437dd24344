"""Hears the bot's mailbox: every mail in the folder is fetched by UID, kept, submitted,
and only then moved out (or deleted).

No mail is lost: the order is fetch -> raw bytes and UID into the store -> ``submit`` (the
core's durable accept) -> ledger ``stored`` -> move/delete -> ledger ``done``. A crash
anywhere leaves the mail in the folder, and the next pass submits it again under the same
message id (the sha256 of its bytes), which the core drops as a duplicate. The ledger is
per UIDVALIDITY: a folder recreated under the same name starts a new one.

Connection trouble is reported as channel health (DEGRADED with the next try) and retried
after ``reconnect_delays_seconds`` (10 s, 30 s, 60 s, 300 s by default, the last repeated).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import threading
import time
from email.parser import BytesHeaderParser

from gateway_bot.channels.email.imap import MailboxSession
from gateway_bot.channels.email.oauth import TokenSource
from gateway_bot.channels.email.store import EmailStore
from gateway_bot.config.channels import EmailChannelSettings
from gateway_bot.core.channel import Submit
from gateway_bot.core.fault_points import reached
from gateway_bot.domain.messages import ChannelHealth, ChannelStatus, RawMessage

log = logging.getLogger(__name__)

CHANNEL = "email"
STOP_WAIT_S = 10.0


class EmailListener:
    def __init__(
        self, settings: EmailChannelSettings, store: EmailStore, tokens: TokenSource | None = None
    ) -> None:
        self._settings = settings
        self._store = store
        self._tokens = tokens
        self._status = ChannelStatus(ChannelHealth.STARTING, "connecting to the IMAP server")
        self._stop = threading.Event()
        self._stopped = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._submit: Submit | None = None
        self._opened = False
        self._smtp_problem: str | None = None

    @property
    def status(self) -> ChannelStatus:
        """IMAP's health; a connected channel whose SMTP server refuses or cannot be reached
        is DEGRADED all the same: mail still comes in, but replies wait."""
        if self._smtp_problem is not None and self._status.health is ChannelHealth.CONNECTED:
            return ChannelStatus(
                ChannelHealth.DEGRADED, f"SMTP: {self._smtp_problem}; replies wait and are retried"
            )
        return self._status

    def smtp_outcome(self, problem: str | None) -> None:
        """The adapter's last SMTP transaction: None when the server took the mail."""
        if problem == self._smtp_problem:
            return
        if problem is None:
            log.info("email channel: the SMTP server takes mail again")
        else:
            log.warning("email channel degraded: SMTP: %s", problem)
        self._smtp_problem = problem

    def _set_status(self, health: ChannelHealth, message: str) -> None:
        if self._status == ChannelStatus(health, message):
            return
        level = logging.INFO if health is ChannelHealth.CONNECTED else logging.WARNING
        log.log(level, "email channel %s: %s", health.value, message)
        self._status = ChannelStatus(health, message)

    async def open_store(self) -> None:
        if not self._opened:
            await self._store.open()
            self._opened = True

    async def start(self, submit: Submit) -> None:
        """Returns at once; the mailbox is read (and reconnected) in the background."""
        await self.open_store()
        self._submit = submit
        self._stop.clear()
        self._stopped.clear()
        self._task = asyncio.create_task(self._run(), name="email-listener")

    async def stop(self) -> None:
        self._stop.set()
        self._stopped.set()
        task, self._task = self._task, None
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), STOP_WAIT_S)
        except TimeoutError:
            task.cancel()
        except Exception:
            log.exception("the email listener ended with an error")

    async def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            session = MailboxSession(self._settings, self._tokens)
            try:
                await asyncio.to_thread(session.connect)
                self._set_status(
                    ChannelHealth.CONNECTED,
                    f"{self._settings.imap_folder} on {self._settings.imap_host}"
                    + ("" if session.can_idle else " (polling)"),
                )
                failures = 0
                while not self._stop.is_set():
                    await self._take_in(session)
                    await asyncio.to_thread(session.wait_for_mail, self._stop)
            except Exception as exc:
                if self._stop.is_set():
                    break
                delays = self._settings.reconnect_delays_seconds
                delay = delays[min(failures, len(delays) - 1)]
                failures += 1
                self._set_status(
                    ChannelHealth.DEGRADED,
                    f"IMAP: {type(exc).__name__}: {exc}; trying again in {delay:g} s",
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopped.wait(), delay)
            finally:
                await asyncio.to_thread(session.close)

    async def _take_in(self, session: MailboxSession) -> None:
        """Submit every mail waiting in the folder, then move it out."""
        assert self._submit is not None
        folder = self._settings.imap_folder
        validity = session.uidvalidity
        for uid in await asyncio.to_thread(session.waiting_uids):
            if self._stop.is_set():
                return
            entry = await self._store.uid_entry(folder, validity, uid)
            size = await asyncio.to_thread(session.size, uid)
            if size is None:
                continue
            oversized = size > self._settings.max_mail_bytes
            if entry is None:
                fetch = session.fetch_header if oversized else session.fetch
                raw = await asyncio.to_thread(fetch, uid)
                if raw is None:
                    continue
                key = "sha256:" + hashlib.sha256(raw).hexdigest()
                await self._store.keep_raw(folder, validity, uid, key, raw)
            else:
                key = entry.message_key
            if entry is None or entry.state == "fetched":
                payload: dict[str, object] = {"message_key": key, "folder": folder, "uid": uid}
                if oversized:
                    payload["oversized"] = size
                stored = await self._submit(
                    RawMessage(
                        channel=CHANNEL,
                        message_id=key,
                        sender=await self._claimed_sender(key),
                        payload=payload,
                        received_at=time.time(),
                    )
                )
                if not stored:
                    continue
                await self._store.mark_uid(folder, validity, uid, "stored")
            await asyncio.to_thread(session.remove, uid)
            reached("email_source_removed")
            await self._store.mark_uid(folder, validity, uid, "done")

    async def _claimed_sender(self, key: str) -> str:
        """The From header as written, for logs and status only: nothing is verified yet."""
        raw = await self._store.raw(key)
        if raw is None:
            return ""
        header = BytesHeaderParser().parsebytes(raw[:65536]).get("From", "")
        return str(header)[:200]
