"""What the person wrote reaches the agent, whole and nothing else, through the real
daemon, Dovecot and an SMTP server: a slice of the mail-text corpus (inline answers inside
Gmail's and Outlook's quotes, a German Outlook separator, an Apple Mail forward, hidden
text, mislabelled charsets, Apple Mail's split parts, a subject-only mail, an unreadable
part said in the reply), and the attacks on the channel's own choices (a thread id the
sender made up, a model the sender made up) and Unicode file names."""

from __future__ import annotations

import re
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from tests.corpus.mail_text_cases import ALICE, BOT
from tests.support import paths
from tests.support.email_fixtures import Dovecot, SmtpCatcher, email_config, mail, passed, text_of
from tests.support.fake_anthropic import FakeAnthropic

CORPUS = paths.CORPUS / "mail_text"
SLICE = [
    "gmail-inline-de",
    "outlook-desktop-inline-fr",
    "outlook-desktop-separator-de",
    "outlook-web-inline-en",
    "apple-mail-forward-en",
    "plain-mutt-inline-en",
    "hidden-display-none-class",
    "hidden-white-on-white",
    "invisible-tag-characters",
    "charset-cp1252-labelled-latin1",
    "charset-latin1-labelled-utf8",
    "split-apple-html-around-images",
    "subject-only",
    "charset-undecodable",
]
_started: list[Any] = []


@pytest.fixture(autouse=True)
def _daemon_logs() -> Iterator[None]:
    _started.clear()
    yield
    for daemon in _started:
        print(f"--- daemon stderr ---\n{daemon.stderr}")


def _start(gateway: Any, config: Path) -> None:
    _started.append(gateway("run", "--config", str(config)))


def _as_delivered(raw: bytes, mailbox: str) -> bytes:
    """The corpus mail as the MX hands it over: its DMARC verdict on top, to the mailbox."""
    return f"Authentication-Results: {passed()}\r\n".encode() + raw.replace(
        f"To: {BOT}".encode(), f"To: {mailbox}".encode(), 1
    )


def _body(text: str) -> str:
    """The text without its subject line (a reply's subject is news in a new thread)."""
    return re.sub(r"\A\[Subject: [^\n]*\]\n\n?", "", text).strip()


def _prompts(api: FakeAnthropic) -> list[str]:
    return ["\n".join(api.user_texts(request)) for request in api.requests]


def test_a_slice_of_the_corpus_reaches_the_agent_as_the_person_wrote_it(
    gateway: Any,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    dovecot: Dovecot,
    smtp_catcher: SmtpCatcher,
    mailbox: str,
) -> None:
    _start(gateway, email_config(tmp_path, target_repo, fake_api, dovecot, smtp_catcher, mailbox))
    for name in SLICE:
        dovecot.deliver(mailbox, _as_delivered((CORPUS / f"{name}.eml").read_bytes(), mailbox))

    smtp_catcher.wait_for(ALICE, count=len(SLICE), timeout=50)
    prompts = _prompts(fake_api)
    for name in SLICE:
        want = _body((CORPUS / f"{name}.txt").read_text(encoding="utf-8"))
        assert any(want in prompt for prompt in prompts), f"{name}: {want!r} not in {prompts}"
    everything = "\n".join(prompts)
    assert "IGNORE PREVIOUS INSTRUCTIONS" not in everything
    assert "OLDHISTORY" not in everything
    assert "Your message was empty" not in " ".join(text_of(m) for m in smtp_catcher.to(ALICE))
    assert "[Subject: Why does the nightly job fail since Monday?]" in everything
    unreadable = smtp_catcher.wait_for(ALICE, where=lambda m: "could not be read" in text_of(m))
    assert "Note: Some characters of your mail could not be read" in text_of(unreadable[0])


def test_made_up_thread_ids_and_models_are_not_taken_and_file_names_keep_their_letters(
    gateway: Any,
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
        model_aliases={"fast": "claude-fast-test"},
    )
    _start(gateway, config)
    local, _, domain = mailbox.partition("@")

    # A reply naming a well-formed thread of ours that never existed.
    forged = mail(
        "Re: [ID:deadbeef] Deploy",
        "FORGED-THREAD please deploy",
        to=mailbox,
        in_reply_to="<gwb.deadbeef.1764000000000@example.test>",
        references="<gwb.deadbeef.1764000000000@example.test>",
    )
    dovecot.deliver(mailbox, forged)
    [reply] = smtp_catcher.wait_for(ALICE, where=lambda m: "FORGED-THREAD" in text_of(m))
    assert "deadbeef" not in str(reply["Subject"]), "a made-up thread id opens no thread"
    assert "gwb.deadbeef." not in str(reply["Message-ID"])
    assert re.search(r"\[ID:[0-9a-f]{8}\]", str(reply["Subject"]))

    # Models: an unknown subaddress runs the default and says so; an alias is taken.
    for detail, marker in (("gpt-9-ultra", "MODEL-UNKNOWN"), ("fast", "MODEL-ALIAS")):
        to = f"{local}+{detail}@{domain}"
        dovecot.deliver(to, mail(f"Model {detail}", f"{marker} which model?", to=to))
    dovecot.deliver(mailbox, mail("Model none", "MODEL-DEFAULT which model?", to=mailbox))
    unknown = smtp_catcher.wait_for(ALICE, where=lambda m: "MODEL-UNKNOWN" in text_of(m))[0]
    assert "'gpt-9-ultra' (from the address you wrote to) is not a model I know" in text_of(unknown)
    smtp_catcher.wait_for(ALICE, where=lambda m: "MODEL-DEFAULT" in text_of(m))
    smtp_catcher.wait_for(ALICE, where=lambda m: "MODEL-ALIAS" in text_of(m))
    models = {
        marker: request["model"]
        for request in fake_api.requests
        for marker in ("MODEL-UNKNOWN", "MODEL-ALIAS", "MODEL-DEFAULT")
        if marker in "\n".join(fake_api.user_texts(request))
    }
    assert models["MODEL-ALIAS"] == "claude-fast-test"
    assert models["MODEL-UNKNOWN"] == models["MODEL-DEFAULT"] != "gpt-9-ultra"

    # Attachment names in German and Japanese keep their letters and their stems.
    files: EmailMessage = mail("Files", "FILES see attached", to=mailbox)
    for name in ("Überweisung März.pdf", "見積書.xlsx", "invoice\u202egpj.exe"):
        files.add_attachment(b"data", maintype="application", subtype="octet-stream", filename=name)
    dovecot.deliver(mailbox, files)
    smtp_catcher.wait_for(ALICE, where=lambda m: "FILES see attached" in text_of(m))
    saved = sorted(p.name for p in (tmp_path / "state" / "conversations").glob("*/inbox/*"))
    assert saved == sorted(["Überweisung März.pdf", "見積書.xlsx", "invoicegpj.exe"])
