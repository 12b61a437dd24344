"""What the email channel must remember across restarts, in the shared state database
(owner "email", tables ``email_*``; the channel is their only writer).

- ``email_uids``: the UID ledger. A mail is keyed by (folder, UIDVALIDITY, UID): UIDs mean
  nothing under another UIDVALIDITY, so a changed one starts a fresh ledger rather than
  skipping or re-reading by stale numbers. ``stored`` = its task is durably accepted (the
  mail may now leave the inbox); ``done`` = it left.
- ``email_raw``: the mail's bytes, written before ``submit``, so parsing and attachment
  downloads after a restart read exactly what was fetched.
- ``email_threads``: Message-IDs (the users' and ours) to the thread key they belong to;
  ``email_thread_owners``: the first sender of each thread (others are new senders there).
- ``email_seen``: the first mail's key per (sender, Message-ID): a second copy is dropped.
- ``email_chat_links``: threads ``/mail`` opened for a chat conversation, per address: a
  mail in such a thread from that address continues the chat conversation.
- ``email_sends``: send intents. A reply's Message-ID is recorded before SMTP is dialled,
  ``sending`` once the server has all of the data but its end-of-data line (until then
  nothing can have been delivered, and an ``intended`` one is sent again), ``sent`` after
  the server accepted it. An intent found ``sending`` after a crash may have been
  delivered: it is never sent again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from gateway_bot.state.database import Database

OWNER = "email"

EMAIL_MIGRATIONS: tuple[str, ...] = (
    # 1: the UID ledger, raw mail, thread map, send intents.
    """
    CREATE TABLE email_uids (
        folder TEXT NOT NULL,
        uidvalidity INTEGER NOT NULL,
        uid INTEGER NOT NULL,
        message_key TEXT NOT NULL,
        state TEXT NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (folder, uidvalidity, uid)
    );
    CREATE TABLE email_raw (
        message_key TEXT PRIMARY KEY,
        raw BLOB NOT NULL,
        received_at REAL NOT NULL
    );
    CREATE TABLE email_threads (
        message_id TEXT PRIMARY KEY,
        thread TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE TABLE email_thread_owners (
        thread TEXT PRIMARY KEY,
        owner TEXT NOT NULL
    );
    CREATE TABLE email_sends (
        send_key TEXT PRIMARY KEY,
        message_id TEXT NOT NULL,
        state TEXT NOT NULL,
        updated_at REAL NOT NULL
    );
    """,
    # 2: the first mail of each (sender, Message-ID): the same mail delivered twice (an
    # alias that forwards into the mailbox, a list copy) has other bytes, so another key.
    """
    CREATE TABLE email_seen (
        sender TEXT NOT NULL,
        message_id TEXT NOT NULL,
        message_key TEXT NOT NULL,
        seen_at REAL NOT NULL,
        PRIMARY KEY (sender, message_id)
    );
    """,
    # 3: threads opened by /mail for a chat conversation, and for whom (decision 0077).
    """
    CREATE TABLE email_chat_links (
        thread TEXT NOT NULL,
        address TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (thread, address)
    );
    """,
)


@dataclass(frozen=True)
class UidEntry:
    message_key: str
    state: str
    """fetched | stored | done"""


@dataclass(frozen=True)
class SendRecord:
    message_id: str
    state: str
    """intended | sending | sent"""


class EmailStore:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def open(self) -> None:
        await self._db.migrate(OWNER, EMAIL_MIGRATIONS)
        self._db.add_pruner(OWNER, self.prune)

    async def prune(self, before: float) -> int:
        """Raw mail and finished ledger rows past retention; threads stay findable by our
        Message-IDs and subject tags, which carry the thread key themselves."""
        touched = await self._db.write("DELETE FROM email_raw WHERE received_at < ?", (before,))
        touched += await self._db.write(
            "DELETE FROM email_uids WHERE state = 'done' AND updated_at < ?", (before,)
        )
        touched += await self._db.write("DELETE FROM email_seen WHERE seen_at < ?", (before,))
        return touched

    async def first_mail_with(self, sender: str, message_id: str, message_key: str) -> str:
        """The key of the first mail ``sender`` sent with ``message_id`` (this one's, unless
        an earlier copy was seen). Per sender: another sender's mail reusing the id (it is
        no secret) never makes the real one a duplicate."""
        await self._db.write(
            "INSERT INTO email_seen (sender, message_id, message_key, seen_at)"
            " VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (sender, message_id, message_key, time.time()),
        )
        row = await self._db.fetch_one(
            "SELECT message_key FROM email_seen WHERE sender=? AND message_id=?",
            (sender, message_id),
        )
        return str(row[0]) if row else message_key

    # -- the UID ledger ------------------------------------------------------------------

    async def uid_entry(self, folder: str, uidvalidity: int, uid: int) -> UidEntry | None:
        row = await self._db.fetch_one(
            "SELECT message_key, state FROM email_uids WHERE folder=? AND uidvalidity=? AND uid=?",
            (folder, uidvalidity, uid),
        )
        return UidEntry(str(row[0]), str(row[1])) if row else None

    async def keep_raw(
        self, folder: str, uidvalidity: int, uid: int, message_key: str, raw: bytes
    ) -> None:
        now = time.time()
        await self._db.write_batch(
            [
                (
                    "INSERT INTO email_raw (message_key, raw, received_at)"
                    " VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                    (message_key, raw, now),
                ),
                (
                    "INSERT INTO email_uids"
                    " (folder, uidvalidity, uid, message_key, state, updated_at)"
                    " VALUES (?, ?, ?, ?, 'fetched', ?) ON CONFLICT DO NOTHING",
                    (folder, uidvalidity, uid, message_key, now),
                ),
            ]
        )

    async def mark_uid(self, folder: str, uidvalidity: int, uid: int, state: str) -> None:
        await self._db.write(
            "UPDATE email_uids SET state=?, updated_at=?"
            " WHERE folder=? AND uidvalidity=? AND uid=?",
            (state, time.time(), folder, uidvalidity, uid),
        )

    async def raw(self, message_key: str) -> bytes | None:
        row = await self._db.fetch_one(
            "SELECT raw FROM email_raw WHERE message_key=?", (message_key,)
        )
        return bytes(row[0]) if row else None

    # -- threads -------------------------------------------------------------------------

    async def thread_of(self, message_id: str) -> str | None:
        row = await self._db.fetch_one(
            "SELECT thread FROM email_threads WHERE message_id=?", (message_id,)
        )
        return str(row[0]) if row else None

    async def remember_thread(self, message_id: str, thread: str) -> None:
        await self._db.write(
            "INSERT INTO email_threads (message_id, thread, created_at) VALUES (?, ?, ?)"
            " ON CONFLICT DO NOTHING",
            (message_id, thread, time.time()),
        )

    async def thread_owner(self, thread: str) -> str | None:
        row = await self._db.fetch_one(
            "SELECT owner FROM email_thread_owners WHERE thread=?", (thread,)
        )
        return str(row[0]) if row else None

    async def claim_thread(self, thread: str, owner: str) -> str:
        """The thread's owner: the first sender who claimed it."""
        await self._db.write(
            "INSERT INTO email_thread_owners (thread, owner) VALUES (?, ?) ON CONFLICT DO NOTHING",
            (thread, owner),
        )
        found = await self.thread_owner(thread)
        assert found is not None
        return found

    async def link_chat(self, thread: str, address: str, conversation_id: str) -> None:
        """``thread`` continues ``conversation_id`` for mail from ``address`` (the first
        link of a thread and address stands)."""
        await self._db.write(
            "INSERT INTO email_chat_links (thread, address, conversation_id, created_at)"
            " VALUES (?, ?, ?, ?) ON CONFLICT (thread, address) DO NOTHING",
            (thread, address.lower(), conversation_id, time.time()),
        )

    async def chat_conversation(self, thread: str, address: str) -> str | None:
        """The chat conversation mail from ``address`` in ``thread`` continues, if any."""
        row = await self._db.fetch_one(
            "SELECT conversation_id FROM email_chat_links WHERE thread=? AND address=?",
            (thread, address.lower()),
        )
        return str(row[0]) if row else None

    # -- send intents --------------------------------------------------------------------

    async def send_record(self, send_key: str) -> SendRecord | None:
        row = await self._db.fetch_one(
            "SELECT message_id, state FROM email_sends WHERE send_key=?", (send_key,)
        )
        return SendRecord(str(row[0]), str(row[1])) if row else None

    async def intend_send(self, send_key: str, message_id: str) -> SendRecord:
        """Record the intent with its Message-ID; an existing intent keeps its own."""
        await self._db.write(
            "INSERT INTO email_sends (send_key, message_id, state, updated_at)"
            " VALUES (?, ?, 'intended', ?) ON CONFLICT DO NOTHING",
            (send_key, message_id, time.time()),
        )
        record = await self.send_record(send_key)
        assert record is not None
        return record

    async def mark_send(self, send_key: str, state: str) -> None:
        await self._db.write(
            "UPDATE email_sends SET state=?, updated_at=? WHERE send_key=?",
            (state, time.time(), send_key),
        )
