"""IMAP IDLE on a quiet mailbox, against the real Dovecot: quiet is not closed.

Before the fix, the check for a connection the server had closed waited for the socket's
whole read timeout (Python polls before ``recv`` on a socket with a timeout, MSG_DONTWAIT
or not) and then took the timeout for a closed connection: every quiet minute the channel
reported itself degraded, reconnected, and sat another minute in a LOGOUT the server never
answers during IDLE. New mail waited up to two minutes.
"""

from __future__ import annotations

import threading
import time

import pytest

from gateway_bot.channels.email import imap
from gateway_bot.config.channels import EmailChannelSettings
from tests.support.email_fixtures import PASSWORD, TRUSTED_ID, Dovecot, mail

pytestmark = pytest.mark.slow


def _settings(dovecot: Dovecot, mailbox: str) -> EmailChannelSettings:
    return EmailChannelSettings(
        address=mailbox,
        imap_host="127.0.0.1",
        imap_port=dovecot.imap_port,
        imap_tls="none",
        imap_password=PASSWORD,
        smtp_host="127.0.0.1",
        smtp_tls="none",
        trusted_authserv_id=TRUSTED_ID,
    )


def test_a_quiet_idle_is_not_taken_for_a_closed_connection(
    dovecot: Dovecot, mailbox: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(imap, "READ_TIMEOUT_S", 2.0)  # quiet for longer than a read may wait
    monkeypatch.setattr(imap, "IDLE_RENEW_S", 5.0)
    dovecot.deliver(mailbox, mail("first", "creates the mailbox"))
    session = imap.MailboxSession(_settings(dovecot, mailbox))
    session.connect()
    try:
        assert session.can_idle
        session.wait_for_mail(threading.Event())  # 5 quiet seconds: returns, no error
        assert session.waiting_uids(), "the session still answers commands"
    finally:
        session.close()


def test_a_connection_the_server_closed_mid_idle_is_noticed(dovecot: Dovecot, mailbox: str) -> None:
    dovecot.deliver(mailbox, mail("first", "creates the mailbox"))
    session = imap.MailboxSession(_settings(dovecot, mailbox))
    session.connect()
    waiting: list[BaseException | None] = []

    def idle() -> None:
        try:
            session.wait_for_mail(threading.Event())
            waiting.append(None)
        except BaseException as exc:
            waiting.append(exc)

    waiter = threading.Thread(target=idle)
    waiter.start()
    deadline = time.monotonic() + 10
    while getattr(session.client, "_idle_tag", None) is None and time.monotonic() < deadline:
        time.sleep(0.05)  # until the IDLE command is out
    dovecot.restart()  # every IMAP process killed: the server side of the socket is gone
    waiter.join(30)
    session.close()
    assert waiting, "wait_for_mail came back"
    assert isinstance(waiting[0], ConnectionError), waiting
