"""One IMAP connection to the bot's folder, blocking (imapclient): the listener calls each
method through ``asyncio.to_thread``.

The wait for new mail is IDLE where the server has it (renewed every few minutes, well
inside RFC 2177's 29), else a sleep of ``poll_interval_seconds``; both look at a
``threading.Event`` every second, so a shutdown never waits on the network.
"""

from __future__ import annotations

import contextlib
import imaplib
import logging
import socket
import ssl
import threading
import time

from imapclient import IMAPClient

from gateway_bot.channels.email.oauth import TokenSource
from gateway_bot.config.channels import EmailChannelSettings

log = logging.getLogger(__name__)

IDLE_RENEW_S = 25.0
"""IDLE is ended and the mailbox looked at this often even when the server said nothing:
a mail that landed between the last search and the IDLE command can go unannounced (seen
in tests after a restart: a minute of silence), so it waits at most this long."""
TICK_S = 1.0
READ_TIMEOUT_S = 60.0
"""How long a command may wait for the server's answer."""
LOGOUT_WAIT_S = 3.0
"""How long LOGOUT may wait when a session ends (see ``close``)."""


class MailboxSession:
    def __init__(self, settings: EmailChannelSettings, tokens: TokenSource | None = None) -> None:
        self._settings = settings
        self._tokens = tokens
        self._client: IMAPClient | None = None
        self.uidvalidity = 0
        self.can_idle = False

    @property
    def client(self) -> IMAPClient:
        if self._client is None:
            raise ConnectionError("not connected to the IMAP server")
        return self._client

    def connect(self) -> None:
        settings = self._settings
        context = ssl.create_default_context()
        client = IMAPClient(
            settings.imap_host,
            port=settings.imap_port,
            ssl=settings.imap_tls == "tls",
            ssl_context=context if settings.imap_tls == "tls" else None,
            timeout=READ_TIMEOUT_S,
        )
        self._client = client
        if settings.imap_tls == "starttls":
            client.starttls(context)
        user = settings.imap_user or settings.address
        if self._tokens is not None:
            client.oauth2_login(user, self._tokens.bearer())
        else:
            client.login(user, settings.imap_password or "")
        selected = client.select_folder(settings.imap_folder)
        self.uidvalidity = int(selected[b"UIDVALIDITY"])
        self.can_idle = settings.use_idle and b"IDLE" in client.capabilities()
        if settings.after_processing == "move" and not client.folder_exists(
            settings.processed_folder
        ):
            client.create_folder(settings.processed_folder)

    def waiting_uids(self) -> list[int]:
        """Every mail in the folder not marked deleted, oldest first."""
        return sorted(int(uid) for uid in self.client.search(["NOT", "DELETED"]))

    def fetch(self, uid: int) -> bytes | None:
        """The whole mail, without setting \\Seen; None when it is gone."""
        data = self.client.fetch([uid], ["BODY.PEEK[]"])
        entry = data.get(uid)
        if entry is None:
            return None
        raw = entry.get(b"BODY[]")
        return bytes(raw) if raw is not None else None

    def size(self, uid: int) -> int | None:
        entry = self.client.fetch([uid], ["RFC822.SIZE"]).get(uid)
        return None if entry is None else int(entry[b"RFC822.SIZE"])

    def fetch_header(self, uid: int) -> bytes | None:
        """The header alone (for a mail too big to read): enough to authenticate and
        answer its sender."""
        entry = self.client.fetch([uid], ["BODY.PEEK[HEADER]"]).get(uid)
        raw = None if entry is None else entry.get(b"BODY[HEADER]")
        return bytes(raw) if raw is not None else None

    def remove(self, uid: int) -> None:
        """Out of the folder: moved to the processed folder, or deleted and expunged."""
        client = self.client
        if self._settings.after_processing == "move":
            if client.has_capability("MOVE"):
                client.move([uid], self._settings.processed_folder)
                return
            client.copy([uid], self._settings.processed_folder)
        client.add_flags([uid], [b"\\Deleted"], silent=True)
        if client.has_capability("UIDPLUS"):
            client.uid_expunge([uid])
        else:
            client.expunge()

    def wait_for_mail(self, stop: threading.Event) -> None:
        """Return when new mail may have arrived, when it is time to look anyway, or when
        ``stop`` is set."""
        if not self.can_idle:
            stop.wait(self._settings.poll_interval_seconds)
            self.client.noop()
            return
        client = self.client
        try:
            client.idle()
            deadline = time.monotonic() + IDLE_RENEW_S
            while not stop.is_set() and time.monotonic() < deadline:
                responses = client.idle_check(timeout=TICK_S)
                if any(_is_news(response) for response in responses):
                    break
                if not responses and _closed_by_peer(client.socket()):
                    # idle_check reports a closed connection as "nothing new", at once
                    raise ConnectionError("the IMAP server closed the connection")
            client.idle_done()
        except imaplib.IMAP4.abort as exc:
            # The same close, seen by imaplib itself when the EOF arrives inside a read
            raise ConnectionError(f"the IMAP server closed the connection ({exc})") from exc

    def close(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        with contextlib.suppress(Exception):
            # A session dropped mid-IDLE never answers LOGOUT (the server waits for DONE):
            # a short wait, not the read timeout, before the socket is shut.
            client.socket().settimeout(LOGOUT_WAIT_S)
            client.logout()
        with contextlib.suppress(Exception):
            client.shutdown()


def _closed_by_peer(sock: socket.socket) -> bool:
    """Has the server closed the connection? Asked without waiting: on a socket with a
    timeout (imapclient gives it its read timeout back after every ``idle_check``) Python
    polls for the whole timeout before ``recv`` even with MSG_DONTWAIT, and a quiet but
    live connection then looked closed after a minute, followed by a minute-long LOGOUT
    into the IDLE. So the socket is made non-blocking for the peek, and a timeout is no
    verdict."""
    timeout = sock.gettimeout()
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (BlockingIOError, InterruptedError, TimeoutError):
        return False
    except OSError:
        return True
    finally:
        sock.settimeout(timeout)


def _is_news(response: tuple[object, ...]) -> bool:
    return len(response) >= 2 and response[1] in (b"EXISTS", b"RECENT")
