"""The email channel's ledger, in process against the real Dovecot and state database: UIDs
count only under their UIDVALIDITY, send intents keep their Message-ID, retention prunes
raw mail."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from gateway_bot.channels.email.listener import EmailListener
from gateway_bot.channels.email.store import EmailStore
from gateway_bot.config.channels import EmailChannelSettings
from gateway_bot.domain.messages import RawMessage
from gateway_bot.state.database import Database
from tests.support.email_fixtures import PASSWORD, TRUSTED_ID, Dovecot, mail

pytestmark = pytest.mark.slow

FOLDER = "Work"


def settings_for(dovecot: Dovecot, mailbox: str) -> EmailChannelSettings:
    return EmailChannelSettings(
        address=mailbox,
        imap_host="127.0.0.1",
        imap_port=dovecot.imap_port,
        imap_tls="none",
        imap_password=PASSWORD,
        imap_folder=FOLDER,
        smtp_host="127.0.0.1",
        trusted_authserv_id=TRUSTED_ID,
        reconnect_delays_seconds=[0.1],
    )


def recreate_folder_with(dovecot: Dovecot, mailbox: str, subject: str) -> int:
    """A fresh folder (a new UIDVALIDITY, UIDs from 1 again) holding one mail."""
    with dovecot.imap(mailbox) as client:
        if client.folder_exists(FOLDER):
            client.delete_folder(FOLDER)
        client.create_folder(FOLDER)
        client.append(FOLDER, mail(subject, subject).as_bytes())
        return int(client.select_folder(FOLDER)[b"UIDVALIDITY"])


async def take_in_once(settings: EmailChannelSettings, store: EmailStore) -> list[RawMessage]:
    submitted: list[RawMessage] = []
    heard = asyncio.Event()

    async def submit(raw: RawMessage) -> bool:
        submitted.append(raw)
        heard.set()
        return True

    listener = EmailListener(settings, store)
    await listener.start(submit)
    await asyncio.wait_for(heard.wait(), 60)
    await listener.stop()
    return submitted


def test_a_recreated_folder_starts_a_new_ledger_so_its_uid_1_is_not_skipped(
    tmp_path: Path, dovecot: Dovecot, mailbox: str
) -> None:
    settings = settings_for(dovecot, mailbox)
    old_validity = recreate_folder_with(dovecot, mailbox, "first mail")

    async def scenario() -> list[RawMessage]:
        database = Database()
        await database.open(tmp_path / "state.db")
        try:
            store = EmailStore(database)
            await store.open()
            # The daemon stored the first mail's task and died before moving it out...
            await store.keep_raw(FOLDER, old_validity, 1, "sha256:first", b"first")
            await store.mark_uid(FOLDER, old_validity, 1, "stored")
            # ...then the folder was recreated: its new UID 1 is another mail.
            new_validity = await asyncio.to_thread(
                recreate_folder_with, dovecot, mailbox, "second mail"
            )
            assert new_validity != old_validity
            return await take_in_once(settings, store)
        finally:
            await database.close()

    submitted = asyncio.run(scenario())
    assert len(submitted) == 1, "the new UID 1 was submitted, not taken for the old one"
    assert submitted[0].payload["uid"] == 1
    assert submitted[0].message_id != "sha256:first"


def test_send_intents_keep_their_message_id_and_retention_prunes_raw_mail(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        database = Database()
        await database.open(tmp_path / "state.db")
        try:
            store = EmailStore(database)
            await store.open()
            first = await store.intend_send("reply:t1", "<gwb.abc.1@example.test>")
            again = await store.intend_send("reply:t1", "<gwb.abc.2@example.test>")
            assert again.message_id == first.message_id == "<gwb.abc.1@example.test>"
            await store.mark_send("reply:t1", "sending")
            record = await store.send_record("reply:t1")
            assert record is not None
            assert record.state == "sending"

            await store.keep_raw("INBOX", 7, 1, "sha256:old", b"old mail")
            await store.mark_uid("INBOX", 7, 1, "done")
            assert await store.prune(time.time() - 3600) == 0, "nothing is old yet"
            assert await database.prune(time.time() + 1) == {"email": 2}
            assert await store.raw("sha256:old") is None
            assert await store.uid_entry("INBOX", 7, 1) is None
        finally:
            await database.close()

    asyncio.run(scenario())
