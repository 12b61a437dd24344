"""No mail lost, none answered twice: kill -9 at each awkward moment, and a Dovecot restart
while the bot is in IDLE. Each crash test ends with a follow-up mail whose answer proves the
restarted daemon has worked through everything before it, then counts the answers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway_bot.channels.email.listener import EmailListener
from gateway_bot.channels.email.store import EmailStore
from gateway_bot.config.channels import EmailChannelSettings
from gateway_bot.domain.messages import RawMessage
from gateway_bot.state.database import Database
from tests.support.email_fixtures import (
    ALICE,
    PASSWORD,
    TRUSTED_ID,
    Dovecot,
    SmtpCatcher,
    email_config,
    mail,
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


def answers_to(smtp: SmtpCatcher, needle: str) -> list[str]:
    return [text for text in (text_of(m) for m in smtp.to(ALICE)) if needle in text]


def wait_for_log(daemon: Any, needle: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while needle not in daemon.stderr:
        assert time.monotonic() < deadline, f"the daemon never logged {needle!r}"
        time.sleep(0.2)


def follow_up_answered(dovecot: Dovecot, smtp: SmtpCatcher, mailbox: str) -> None:
    dovecot.deliver(mailbox, mail("Later", "FOLLOW-UP question", to=mailbox))
    smtp.wait_for(ALICE, where=lambda m: "Echo: FOLLOW-UP" in text_of(m))


def test_killed_while_the_agent_runs_the_restart_answers_once(
    gateway,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    dovecot: Dovecot,
    smtp_catcher: SmtpCatcher,
    mailbox: str,
) -> None:
    config = email_config(tmp_path, target_repo, fake_api, dovecot, smtp_catcher, mailbox)
    fake_api.hold("CRASH-RUN")
    first = start_daemon(gateway, config)
    dovecot.deliver(mailbox, mail("Crash", "CRASH-RUN please", to=mailbox))
    assert fake_api.wait_for_held(60), "the agent never reached the model"
    assert dovecot.folder_uids(mailbox) == [], "a stored mail leaves the inbox"
    first.kill()
    fake_api.release()

    start_daemon(gateway, config)
    follow_up_answered(dovecot, smtp_catcher, mailbox)
    smtp_catcher.wait_for(ALICE, where=lambda m: "Echo: CRASH-RUN" in text_of(m))
    assert len(answers_to(smtp_catcher, "Echo: CRASH-RUN")) == 1


def test_killed_after_the_smtp_server_accepted_the_reply_sends_no_second_one(
    gateway,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    dovecot: Dovecot,
    smtp_catcher: SmtpCatcher,
    mailbox: str,
) -> None:
    config = email_config(tmp_path, target_repo, fake_api, dovecot, smtp_catcher, mailbox)
    smtp_catcher.hold_after_accept = "Echo: SMTP-CRASH"
    first = start_daemon(gateway, config)
    dovecot.deliver(mailbox, mail("Crash", "SMTP-CRASH now", to=mailbox))
    assert smtp_catcher.holding.wait(90), "the reply never reached the SMTP server"
    first.kill()  # the server has the mail; the daemon never heard its 250
    smtp_catcher.released.set()

    second = start_daemon(gateway, config)
    follow_up_answered(dovecot, smtp_catcher, mailbox)
    assert len(answers_to(smtp_catcher, "Echo: SMTP-CRASH")) == 1
    assert "is not sent again" in second.stderr


def test_killed_after_saying_data_before_the_mail_was_handed_over_the_restart_sends_it_once(
    gateway,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    dovecot: Dovecot,
    smtp_catcher: SmtpCatcher,
    mailbox: str,
) -> None:
    """The daemon dies with the reply's transaction open up to DATA (the server has not
    answered 354, so it holds none of the mail): nothing can have been delivered, so the
    next daemon sends the reply, once, instead of giving it up as possibly sent."""
    config = email_config(tmp_path, target_repo, fake_api, dovecot, smtp_catcher, mailbox)
    smtp_catcher.hold_data = True
    first = start_daemon(gateway, config)
    dovecot.deliver(mailbox, mail("Cut", "DATA-CUT please", to=mailbox))
    assert smtp_catcher.holding_data.wait(90), "the reply's DATA never reached the server"
    first.kill()
    smtp_catcher.released.set()
    assert not answers_to(smtp_catcher, "Echo: DATA-CUT"), "the server kept nothing yet"

    second = start_daemon(gateway, config)
    smtp_catcher.wait_for(ALICE, where=lambda m: "Echo: DATA-CUT" in text_of(m))
    follow_up_answered(dovecot, smtp_catcher, mailbox)
    assert len(answers_to(smtp_catcher, "Echo: DATA-CUT")) == 1
    assert "is not sent again" not in second.stderr


def test_killed_before_the_smtp_transaction_the_restart_sends_the_reply(
    gateway,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    dovecot: Dovecot,
    smtp_catcher: SmtpCatcher,
    mailbox: str,
) -> None:
    """The SMTP server is down when the reply is due: the task waits, nothing is lost, and
    the reply goes out (once) when the server is back after a restart."""
    config = email_config(tmp_path, target_repo, fake_api, dovecot, smtp_catcher, mailbox)
    smtp_catcher.stop()
    first = start_daemon(gateway, config)
    dovecot.deliver(mailbox, mail("Down", "SMTP-DOWN reply later", to=mailbox))
    wait_for_log(first, "attempt 1 of")
    first.kill()
    smtp_catcher.start_on(smtp_catcher.port)

    start_daemon(gateway, config)
    smtp_catcher.wait_for(ALICE, where=lambda m: "Echo: SMTP-DOWN" in text_of(m))
    follow_up_answered(dovecot, smtp_catcher, mailbox)
    assert len(answers_to(smtp_catcher, "Echo: SMTP-DOWN")) == 1


def test_dovecot_restarted_mid_idle_the_channel_recovers_and_loses_nothing(
    gateway,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    dovecot: Dovecot,
    smtp_catcher: SmtpCatcher,
    mailbox: str,
) -> None:
    config = email_config(tmp_path, target_repo, fake_api, dovecot, smtp_catcher, mailbox)
    daemon = start_daemon(gateway, config)
    dovecot.deliver(mailbox, mail("Before", "BEFORE the outage", to=mailbox))
    smtp_catcher.wait_for(ALICE, where=lambda m: "Echo: BEFORE" in text_of(m))

    dovecot.restart()  # every Dovecot process killed: the bot's IDLE connection drops
    dovecot.deliver(mailbox, mail("After", "AFTER the outage", to=mailbox))

    smtp_catcher.wait_for(ALICE, where=lambda m: "Echo: AFTER" in text_of(m))
    assert "email channel degraded" in daemon.stderr
    assert len(answers_to(smtp_catcher, "Echo: AFTER")) == 1
    assert dovecot.folder_uids(mailbox) == []


def wait_until_moved_out(dovecot: Dovecot, mailbox: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while dovecot.folder_uids(mailbox):
        assert time.monotonic() < deadline, "the mail never left the inbox"
        time.sleep(0.1)


def test_a_mail_whose_submit_failed_stays_in_the_inbox_and_is_taken_in_once(
    tmp_path: Path, dovecot: Dovecot, mailbox: str
) -> None:
    """The crash between fetch and store, in process: the first listener's submit dies
    before the core stored the mail; the mail stays; the next listener takes it in once."""
    settings = EmailChannelSettings(
        address=mailbox,
        imap_host="127.0.0.1",
        imap_port=dovecot.imap_port,
        imap_tls="none",
        imap_password=PASSWORD,
        smtp_host="127.0.0.1",
        trusted_authserv_id=TRUSTED_ID,
        reconnect_delays_seconds=[0.1],
    )
    dovecot.deliver(mailbox, mail("Intake", "INTAKE-CRASH", to=mailbox))

    async def scenario() -> list[RawMessage]:
        database = Database()
        await database.open(tmp_path / "state.db")
        submitted: list[RawMessage] = []
        crashed = asyncio.Event()
        try:

            async def dies(raw: RawMessage) -> bool:
                crashed.set()
                raise RuntimeError("the daemon died here")

            first = EmailListener(settings, EmailStore(database))
            await first.start(dies)
            await asyncio.wait_for(crashed.wait(), 60)
            await first.stop()
            assert dovecot.folder_uids(mailbox) != [], "not stored, so not moved"

            done = asyncio.Event()

            async def stores(raw: RawMessage) -> bool:
                submitted.append(raw)
                done.set()
                return True

            second = EmailListener(settings, EmailStore(database))
            await second.start(stores)
            await asyncio.wait_for(done.wait(), 60)
            await asyncio.to_thread(wait_until_moved_out, dovecot, mailbox)
            await second.stop()
        finally:
            await database.close()
        return submitted

    submitted = asyncio.run(scenario())
    assert len(submitted) == 1
    assert len(dovecot.folder_uids(mailbox, "Processed")) == 1
