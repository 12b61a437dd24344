"""Email beyond the first exchange, against the real daemon, Dovecot and an SMTP server:
an unknown sender's mail carded to an owner in chat (Slack) and run on Allow, a stranger
writing into someone else's thread, attachments in (hostile names, over the limit) and
outbox files out, the model chosen by subaddress."""

from __future__ import annotations

import re
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.email_fixtures import (
    ALICE,
    DOMAIN,
    OUR_ID,
    Dovecot,
    SmtpCatcher,
    email_config,
    mail,
    text_of,
)
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import APP_TOKEN, BOT_TOKEN, TEAM, FakeSlack

pytestmark = pytest.mark.slow

BOB = f"bob@{DOMAIN}"
OWNER, APPROVALS = "U0OWNER", "C0APPROVALS"

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


def test_an_unknown_sender_is_carded_in_chat_and_allow_runs_the_mail(
    gateway,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    dovecot: Dovecot,
    smtp_catcher: SmtpCatcher,
    mailbox: str,
    fake_slack: FakeSlack,
) -> None:
    fake_slack.add_user(OWNER, "Owner")
    fake_slack.add_channel(APPROVALS, "approvals")
    slack = {
        "bot_token": BOT_TOKEN,
        "app_token": APP_TOKEN,
        "team_ids": [TEAM],
        "allowed_users": [OWNER],
        "api_base_url": fake_slack.base_url,
    }
    config = email_config(
        tmp_path,
        target_repo,
        fake_api,
        dovecot,
        smtp_catcher,
        mailbox,
        extra_channels={"slack": slack},
        access={
            "owners": {"slack": [OWNER]},
            "approval_destination": {"channel": "slack", "context": {"channel": APPROVALS}},
        },
    )
    start_daemon(gateway, config)
    fake_slack.wait_connected()

    dovecot.deliver(mailbox, mail("Access", "BOB-ASK may I use the bot?", sender=BOB))
    card = fake_slack.wait_until(
        lambda: next(iter(fake_slack.messages[APPROVALS]), None), what="an approval card"
    )
    text = str(card["blocks"][0]["text"]["text"])
    assert BOB in text
    assert "BOB-ASK may I use the bot?" in text
    assert smtp_catcher.to(BOB) == [], "nothing runs, and Bob hears nothing, before Allow"
    allow = next(
        e["action_id"]
        for b in card["blocks"]
        if b["type"] == "actions"
        for e in b["elements"]
        if e["action_id"].endswith("allow")
    )
    fake_slack.click(OWNER, APPROVALS, card["ts"], allow)

    [reply] = smtp_catcher.wait_for(BOB)
    assert "Echo: BOB-ASK may I use the bot?" in text_of(reply)
    assert OUR_ID.match(str(reply["Message-ID"]))


def test_someone_else_writing_into_a_thread_is_a_new_sender_there(
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
        allowed_senders=[ALICE, BOB],
    )
    start_daemon(gateway, config)
    dovecot.deliver(mailbox, mail("Plan", "ALICE-PLAN the plan", to=mailbox))
    [reply] = smtp_catcher.wait_for(ALICE)

    hijack = mail(
        str(reply["Subject"]),
        "BOB-HIJACK what did Alice ask?",
        sender=BOB,
        in_reply_to=str(reply["Message-ID"]),
    )
    dovecot.deliver(mailbox, hijack)
    dovecot.deliver(mailbox, mail("Own thread", "BOB-OWN my own question", sender=BOB))

    smtp_catcher.wait_for(BOB, where=lambda m: "Own thread" in str(m["Subject"]))
    subjects = [str(m["Subject"]) for m in smtp_catcher.to(BOB)]
    assert len(subjects) == 1, f"Bob's mail into Alice's thread is not answered: {subjects}"
    prompts = " ".join(" ".join(fake_api.user_texts(r)) for r in fake_api.requests)
    assert "BOB-HIJACK" not in prompts
    assert "BOB-OWN" in prompts


def _with_attachment(message: EmailMessage, name: str, data: bytes) -> EmailMessage:
    message.add_attachment(data, maintype="application", subtype="octet-stream", filename=name)
    return message


def test_attachments_in_with_hostile_names_and_limits_and_outbox_files_out(
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
        max_attachment_bytes=1000,
    )
    start_daemon(gateway, config)
    message = mail("Files", "WRITE_FILE name=../outbox/result.txt text=hello-out", to=mailbox)
    _with_attachment(message, "../../etc/passwd", b"root:x:0:0\n")
    _with_attachment(message, "big.bin", b"x" * 5000)
    dovecot.deliver(mailbox, message)

    notice = smtp_catcher.wait_for(ALICE, where=lambda m: "big.bin" in text_of(m))[0]
    assert "big.bin (5 KB) is over the 1 KB limit" in text_of(notice)
    reply = smtp_catcher.wait_for(ALICE, where=lambda m: "Echo:" in text_of(m))[0]
    files = {part.get_filename(): part.get_content() for part in reply.iter_attachments()}
    assert files == {"result.txt": "hello-out"}
    state = tmp_path / "state" / "conversations"
    inboxes = list(state.glob("*/inbox/*"))
    assert [p.name for p in inboxes] == ["passwd"]
    assert inboxes[0].read_bytes() == b"root:x:0:0\n"
    assert not list(state.glob("*/etc")), "the name never reaches outside the inbox"
    assert "inbox/passwd" in " ".join(fake_api.user_texts(fake_api.requests[0]))


def test_a_subaddress_picks_the_model_for_a_new_conversation(
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
    local, _, domain = mailbox.partition("@")
    to = f"{local}+claude-opus-test@{domain}"
    dovecot.deliver(to, mail("Model", "which model?", to=to))
    smtp_catcher.wait_for(ALICE)
    assert {r["model"] for r in fake_api.requests} == {"claude-opus-test"}
    assert re.search(r"which model", " ".join(fake_api.user_texts(fake_api.requests[0])))


def test_a_command_on_the_first_line_is_answered_and_an_oversized_mail_is_not_read(
    gateway,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    dovecot: Dovecot,
    smtp_catcher: SmtpCatcher,
    mailbox: str,
) -> None:
    config = email_config(
        tmp_path, target_repo, fake_api, dovecot, smtp_catcher, mailbox, max_mail_bytes=20000
    )
    start_daemon(gateway, config)
    dovecot.deliver(mailbox, mail("Status", "/status\n\n-- \nAlice", to=mailbox))
    status = smtp_catcher.wait_for(ALICE, where=lambda m: "Status" in str(m["Subject"]))[0]
    assert text_of(status).startswith("Conversation ")

    big = mail("Huge", "BIG-MAIL " + "x" * 30000, to=mailbox)
    dovecot.deliver(mailbox, big)
    notice = smtp_catcher.wait_for(ALICE, where=lambda m: "Huge" in str(m["Subject"]))[0]
    assert "is over the 20 KB limit for mail, so it was not read" in text_of(notice)
    assert str(notice["In-Reply-To"]) == str(big["Message-ID"])
    prompts = " ".join(" ".join(fake_api.user_texts(r)) for r in fake_api.requests)
    assert "BIG-MAIL" not in prompts
    assert fake_api.requests == [], "neither the command nor the oversized mail ran the agent"


def test_the_optional_acknowledgement_comes_once_before_the_reply(
    gateway,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    dovecot: Dovecot,
    smtp_catcher: SmtpCatcher,
    mailbox: str,
) -> None:
    config = email_config(
        tmp_path, target_repo, fake_api, dovecot, smtp_catcher, mailbox, acknowledge=True
    )
    settings = yaml.safe_load(config.read_text())
    settings["dashboard"] = {
        "token": "t" * 24,
        "port": 0,
        "public_url": "https://bot.example.test/dash",
    }
    config.write_text(yaml.safe_dump(settings))
    start_daemon(gateway, config)
    dovecot.deliver(mailbox, mail("Status", "/status", to=mailbox))
    dovecot.deliver(mailbox, mail("Task", "ACK-ME please", to=mailbox))

    smtp_catcher.wait_for(ALICE, where=lambda m: "Echo: ACK-ME" in text_of(m))
    texts = [text_of(m) for m in smtp_catcher.to(ALICE)]
    acks = [i for i, t in enumerate(texts) if t.startswith("Working on it")]
    assert len(acks) == 1, "one acknowledgement, for the task only (not the command)"
    assert acks[0] < next(i for i, t in enumerate(texts) if "Echo: ACK-ME" in t)
    ack = smtp_catcher.to(ALICE)[acks[0]]
    assert re.search(r"https://bot\.example\.test/dash/conversations/[0-9a-f]+", texts[acks[0]])
    assert str(ack["Subject"]).endswith("] Task")
