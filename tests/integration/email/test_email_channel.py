"""People email the real daemon (real Claude Code CLI, fake model API) through a real
Dovecot (mail delivered over LMTP, read by the bot over IMAP) and get answers through a real
SMTP server (aiosmtpd): threaded replies, conversations resumed by replying, forged
authentication refused without an answer, attachments, crashes and a mail server outage."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.email_fixtures import (
    ALICE,
    DOMAIN,
    OUR_ID,
    TRUSTED_ID,
    Dovecot,
    SmtpCatcher,
    email_config,
    mail,
    passed,
    text_of,
)
from tests.support.fake_anthropic import FakeAnthropic

pytestmark = pytest.mark.slow

_started: list[Any] = []


@pytest.fixture(autouse=True)
def _daemon_logs() -> Iterator[None]:
    _started.clear()
    yield
    for daemon in _started:
        print(f"--- daemon stderr ---\n{daemon.stderr}")


def start_daemon(gateway: Any, config: Path) -> Any:
    daemon = gateway("run", "--config", str(config))
    _started.append(daemon)
    return daemon


def test_new_mail_gets_a_threaded_reply_and_replying_resumes_the_conversation(
    gateway,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    dovecot: Dovecot,
    smtp_catcher: SmtpCatcher,
    mailbox: str,
) -> None:
    start_daemon(
        gateway, email_config(tmp_path, target_repo, fake_api, dovecot, smtp_catcher, mailbox)
    )
    first = mail("Build status", "please say hello", to=mailbox)
    dovecot.deliver(mailbox, first)

    [reply] = smtp_catcher.wait_for(ALICE)
    match = OUR_ID.match(str(reply["Message-ID"]))
    assert match, reply["Message-ID"]
    thread = match.group(1)
    assert str(reply["Subject"]) == f"Re: [ID:{thread}] Build status"
    assert str(reply["In-Reply-To"]) == str(first["Message-ID"])
    assert str(first["Message-ID"]) in str(reply["References"])
    assert str(reply["From"]).endswith(f"<{mailbox}>")
    assert "Echo: please say hello" in text_of(reply)
    html = reply.get_body(preferencelist=("html",))
    assert html is not None
    assert "Echo: please say hello" in str(html.get_content())

    answer = mail(
        f"Re: [ID:{thread}] Build status",
        "and now goodbye\n\nOn Tue, 24 Nov 2026 at 10:00, gateway-bot wrote:\n"
        "> Echo: please say hello\n",
        to=mailbox,
        in_reply_to=str(reply["Message-ID"]),
        references=f"{first['Message-ID']} {reply['Message-ID']}",
    )
    dovecot.deliver(mailbox, answer)

    second = smtp_catcher.wait_for(ALICE, 2)[1]
    assert str(second["Subject"]) == f"Re: [ID:{thread}] Build status"
    assert str(second["In-Reply-To"]) == str(answer["Message-ID"])
    assert "Echo: and now goodbye" in text_of(second)
    history = " ".join(fake_api.user_texts(fake_api.requests[-1]))
    assert "please say hello" in history, "the resumed session carries the first exchange"
    assert "wrote:" not in history, "the quoted history does not reach the agent again"
    assert dovecot.folder_uids(mailbox) == [], "answered mail left the inbox"
    assert len(dovecot.folder_uids(mailbox, "Processed")) == 2


FORGERIES = {
    "wrong authserv-id": [f"mx.other.test; dmarc=pass header.from={DOMAIN}"],
    "look-alike id": [f"{TRUSTED_ID}.evil.test; dmarc=pass header.from={DOMAIN}"],
    "second header with the trusted id": [passed(), passed()],
    "forged pass below the MX's fail": [
        f"{TRUSTED_ID}; dmarc=fail header.from={DOMAIN}",
        passed(),
    ],
    "dmarc=pass only in a comment": [f"{TRUSTED_ID}; dmarc=fail (dmarc=pass) header.from={DOMAIN}"],
    "header.from of another domain": [passed("evil.test")],
}


def test_forged_authentication_is_refused_and_never_answered(
    gateway,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    dovecot: Dovecot,
    smtp_catcher: SmtpCatcher,
    mailbox: str,
) -> None:
    daemon = start_daemon(
        gateway, email_config(tmp_path, target_repo, fake_api, dovecot, smtp_catcher, mailbox)
    )
    for name, headers in FORGERIES.items():
        dovecot.deliver(mailbox, mail(f"forged: {name}", f"RUN_BASH echo {name}", auth=headers))
    two_froms = mail("forged: two From mailboxes", "hello")
    del two_froms["From"]
    two_froms["From"] = f"{ALICE}, mallory@evil.test"
    dovecot.deliver(mailbox, two_froms)
    dressed = mail("forged: display name dressed as an address", "hello")
    del dressed["From"]
    dressed["From"] = f'"{ALICE}" <mallory@evil.test>'
    dovecot.deliver(mailbox, dressed)
    second_from = mail("forged: second From header", "hello").as_bytes()
    dovecot.deliver(
        mailbox, second_from.replace(b"From: ", b"From: mallory@evil.test\r\nFrom: ", 1)
    )
    auto_reply = mail("Out of office", "I am away")
    auto_reply["Auto-Submitted"] = "auto-replied"
    dovecot.deliver(mailbox, auto_reply)
    dovecot.deliver(mailbox, mail("genuine", "a genuine question", to=mailbox))

    smtp_catcher.wait_for(ALICE, where=lambda m: "genuine" in str(m["Subject"]))
    subjects = [str(m["Subject"]) for _, m in smtp_catcher.messages]
    assert len(subjects) == 1, f"only the genuine mail is answered: {subjects}"
    assert not any("echo" in " ".join(fake_api.user_texts(r)) for r in fake_api.requests)
    refused = [line for line in daemon.stderr.splitlines() if "refused" in line]
    assert len(refused) == len(FORGERIES) + 4, refused
    assert dovecot.folder_uids(mailbox) == [], "refused mail leaves the inbox too"


def test_without_idle_the_mailbox_is_polled(
    gateway,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    dovecot: Dovecot,
    smtp_catcher: SmtpCatcher,
    mailbox: str,
) -> None:
    config = email_config(
        tmp_path,
        target_repo,
        fake_api,
        dovecot,
        smtp_catcher,
        mailbox,
        use_idle=False,
        poll_interval_seconds=0.5,
        after_processing="delete",
    )
    daemon = start_daemon(gateway, config)
    dovecot.deliver(mailbox, mail("Polled", "POLLED question", to=mailbox))
    smtp_catcher.wait_for(ALICE, where=lambda m: "Echo: POLLED question" in text_of(m))
    assert "(polling)" in daemon.stderr
    assert dovecot.folder_uids(mailbox) == []
    assert dovecot.folder_uids(mailbox, "Processed") == [], "deleted, not moved"
