"""Mail whose structure is the attack, against the real daemon, Dovecot and an SMTP server:
parts nested deeper than Python's email package can walk. Each test worked as an attack
before its fix (the sender heard nothing: the parse, or the walk of its parts, died of
RecursionError)."""

from __future__ import annotations

from email.message import EmailMessage
from email.utils import make_msgid
from pathlib import Path
from typing import Any

from tests.support.email_fixtures import (
    ALICE,
    DOMAIN,
    Dovecot,
    SmtpCatcher,
    email_config,
    mail,
    passed,
    text_of,
)
from tests.support.fake_anthropic import FakeAnthropic

LEVELS = 1200
"""Deeper than the interpreter's recursion limit (1000): about 50 kB of mail."""
MAIL_LEVELS = 600
"""Attached mails this deep parse, but measuring the attachment (``as_bytes``, a level of
recursion per mail and more) does not."""


def _head(subject: str, message_id: str) -> bytes:
    return (
        f"Authentication-Results: {passed()}\r\nFrom: {ALICE}\r\nTo: bot@{DOMAIN}\r\n"
        f"Subject: {subject}\r\nMessage-ID: {message_id}\r\nMIME-Version: 1.0\r\n"
    ).encode()


def nested_multiparts(message_id: str) -> bytes:
    body = ["Content-Type: multipart/mixed; boundary=B0\r\n\r\n"]
    for level in range(1, LEVELS):
        body.append(f"--B{level - 1}\r\nContent-Type: multipart/mixed; boundary=B{level}\r\n\r\n")
    body.append(f"--B{LEVELS - 1}\r\nContent-Type: text/plain\r\n\r\nDEEP-PARTS run me\r\n")
    return _head("Deep parts", message_id) + "".join(body).encode()


def nested_mails(message_id: str) -> bytes:
    inner = b"Content-Type: text/plain\r\n\r\nDEEP-MAILS run me\r\n"
    for _ in range(MAIL_LEVELS):
        inner = b"Content-Type: message/rfc822\r\n\r\n" + inner
    return (
        _head("Deep mails", message_id)
        + b"Content-Type: multipart/mixed; boundary=X\r\n\r\n--X\r\n"
        + b"Content-Type: text/plain\r\n\r\nsee attached\r\n--X\r\n"
        + inner
        + b"\r\n--X--\r\n"
    )


def test_a_mail_nested_too_deep_to_read_is_answered_and_the_next_mail_still_runs(
    gateway: Any,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    dovecot: Dovecot,
    smtp_catcher: SmtpCatcher,
    mailbox: str,
) -> None:
    config = email_config(tmp_path, target_repo, fake_api, dovecot, smtp_catcher, mailbox)
    daemon = gateway("run", "--config", str(config))
    attacks = {make_msgid(domain=DOMAIN): make for make in (nested_multiparts, nested_mails)}
    for message_id, make in attacks.items():
        dovecot.deliver(mailbox, make(message_id))
    after: EmailMessage = mail("After", "PLAIN-MAIL still there?", to=mailbox)
    dovecot.deliver(mailbox, after)

    smtp_catcher.wait_for(ALICE, where=lambda m: "Echo: PLAIN-MAIL" in text_of(m))
    for message_id in attacks:
        notices = smtp_catcher.wait_for(
            ALICE, where=lambda m, i=message_id: str(m["In-Reply-To"]) == i
        )
        assert len(notices) == 1, [text_of(n) for n in notices]
        assert "nested too deeply to be read" in text_of(notices[0])
        assert "nothing was done" in text_of(notices[0])
    prompts = " ".join(" ".join(fake_api.user_texts(r)) for r in fake_api.requests)
    assert "DEEP-" not in prompts, "an unread mail never reaches the agent"
    assert daemon.process.poll() is None, daemon.stderr
    assert dovecot.folder_uids(mailbox) == [], "every mail was taken in and left the inbox"
