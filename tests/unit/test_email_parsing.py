"""What the agent reads of a mail: each client family's quote cut off, inline answers kept
with their questions, declared charsets honoured; who the sender is, and whether the MX's
DMARC verdict vouches for them. Pure functions, no servers."""

from __future__ import annotations

from email.message import EmailMessage
from email.mime.text import MIMEText

import pytest

from gateway_bot.channels.email import mime
from gateway_bot.channels.email.auth import (
    Refused,
    check_dmarc,
    check_not_automatic,
    is_allowed,
    single_sender,
)
from gateway_bot.channels.email.compose import Outgoing, build_mail
from gateway_bot.channels.email.quotes import REMOVED, html_to_text, plain_to_text

# -- HTML, per client family --------------------------------------------------------------

GMAIL = """<div dir="ltr">Sounds good, ship it.<br><div class="gmail_signature">Alice</div></div>
<br><div class="gmail_quote"><div dir="ltr" class="gmail_attr">On Tue, Bot wrote:<br></div>
<blockquote class="gmail_quote">Echo: the old answer</blockquote></div>"""

OUTLOOK_DESKTOP = """<div>Top reply</div><hr style="display:inline-block;width:98%">
<div id="divRplyFwdMsg"><b>From:</b> Bot<br><b>Sent:</b> Tuesday</div>
<div>the old answer</div><div>more of the old answer</div>"""

OUTLOOK_WEB = """<div>Thanks, that works.</div>
<div id="mail-editor-reference-message-container"><div>From: Bot</div>
<div>the old answer</div></div>"""

YAHOO = """<div>Yes please</div><div class="yahoo_quoted">
<div>On Monday, Bot wrote:</div><div>the old answer</div></div>"""

THUNDERBIRD = """<html><body><p>Go ahead.</p><div class="moz-cite-prefix">On 1/1/26 Bot
wrote:<br></div><blockquote type="cite">the old answer</blockquote></body></html>"""

APPLE = """<div>Looks right.</div><div><br><blockquote type="cite"><div>On 1 Jan, Bot wrote:
</div><div>the old answer</div></blockquote></div>"""


@pytest.mark.parametrize(
    ("html", "kept"),
    [
        (GMAIL, "Sounds good, ship it."),
        (OUTLOOK_DESKTOP, "Top reply"),
        (OUTLOOK_WEB, "Thanks, that works."),
        (YAHOO, "Yes please"),
        (THUNDERBIRD, "Go ahead."),
        (APPLE, "Looks right."),
    ],
    ids=["gmail", "outlook-desktop", "outlook-web", "yahoo", "thunderbird", "apple-mail"],
)
def test_html_reply_keeps_the_new_words_and_drops_the_quoted_history(html: str, kept: str) -> None:
    text = html_to_text(html)
    assert text.startswith(kept)
    assert "the old answer" not in text
    assert "wrote:" not in text
    assert text.endswith(REMOVED)


def test_gmail_signature_is_kept() -> None:
    assert "Alice" in html_to_text(GMAIL)


def test_html_inline_reply_keeps_the_questions_as_quotes() -> None:
    text = html_to_text(
        "<p>See below.</p><div class=moz-cite-prefix>On 1/1 Bot wrote:</div>"
        "<blockquote type=cite>Which file?</blockquote><p>src/a.py</p>"
        "<blockquote type=cite>Which line?</blockquote><p>line 3</p>"
    )
    assert "> Which file?" in text
    assert "> Which line?" in text
    assert text.index("> Which file?") < text.index("src/a.py") < text.index("> Which line?")
    assert text.rstrip().endswith("line 3")
    assert REMOVED not in text


def test_html_becomes_markdown_like_text() -> None:
    text = html_to_text("<p>Do <b>this</b>:</p><ul><li>one</li><li>two</li></ul><pre>x()</pre>")
    assert text == "Do **this**:\n\n- one\n- two\n\n```\nx()\n```"


def test_script_and_style_never_reach_the_agent() -> None:
    text = html_to_text("<style>p{}</style><script>alert(1)</script><p>hi</p>")
    assert text == "hi"


# -- plain text ---------------------------------------------------------------------------


def test_plain_trailing_quote_is_removed_and_the_signature_kept() -> None:
    text = plain_to_text(
        "Thanks, please also fix the tests.\n\n--\nAlice\n\n"
        "On Tue, 24 Nov 2026 at 10:00, Bot <bot@example.test> wrote:\n> Echo: hello\n> more\n"
    )
    assert text == f"Thanks, please also fix the tests.\n\n--\nAlice\n\n{REMOVED}"


def test_plain_inline_reply_keeps_the_quoted_context() -> None:
    body = (
        "See my answers below.\n\n"
        "On Tue, 24 Nov 2026 at 10:00, Bot <bot@example.test> wrote:\n"
        "> Which file?\nsrc/a.py\n> And which line?\nline 3\n"
    )
    text = plain_to_text(body)
    assert text.startswith("See my answers below.")
    assert "> Which file?\nsrc/a.py\n> And which line?\nline 3" in text
    assert REMOVED not in text


def test_plain_mail_without_quotes_is_unchanged() -> None:
    assert plain_to_text("just a question\nover two lines\n") == "just a question\nover two lines"


# -- charsets -----------------------------------------------------------------------------


def _raw(text: str, charset: str, subtype: str = "plain") -> EmailMessage:
    part = MIMEText(text, subtype, charset)
    part["From"] = "alice@example.test"
    part["Subject"] = "charset"
    return mime.parse_bytes(part.as_bytes())


@pytest.mark.parametrize(
    ("charset", "text"),
    [
        ("big5", "請幫我修正這個錯誤"),
        ("iso-8859-1", "Grüße aus Köln, ça va?"),
        ("windows-1252", "It costs 5 \u20ac \u2013 \u201cquoted\u201d"),
    ],
)
def test_declared_charsets_are_honoured(charset: str, text: str) -> None:
    assert mime.body_text(_raw(text, charset)) == text


def test_html_part_in_big5_is_decoded() -> None:
    assert mime.body_text(_raw("<p>請幫我</p>", "big5", "html")) == "請幫我"


def test_an_unknown_charset_still_yields_the_text() -> None:
    raw = (
        b"From: alice@example.test\r\nContent-Type: text/plain; charset=x-no-such\r\n\r\nhello\r\n"
    )
    assert mime.body_text(mime.parse_bytes(raw)) == "hello"


def test_html_is_preferred_over_plain() -> None:
    message = EmailMessage()
    message["From"] = "alice@example.test"
    message.set_content("the plain version")
    message.add_alternative("<p>the <i>html</i> version</p>", subtype="html")
    assert mime.body_text(mime.parse_bytes(message.as_bytes())) == "the *html* version"


def test_an_attached_mail_is_one_eml_file_and_never_read_as_the_body() -> None:
    inner = EmailMessage()
    inner["From"] = "carol@example.test"
    inner["Subject"] = "old thread"
    inner.set_content("INNER plain")
    inner.add_alternative("<p>INNER html</p>", subtype="html")
    inner.add_attachment(b"inner-bytes", maintype="application", subtype="pdf", filename="i.pdf")
    outer = EmailMessage()
    outer["From"] = "alice@example.test"
    outer.set_content("see the forwarded mail")
    outer.add_attachment(inner)
    outer.add_attachment(b"\x89PNG", maintype="image", subtype="png", filename="shot.png")
    parsed = mime.parse_bytes(outer.as_bytes())

    assert mime.body_text(parsed) == "see the forwarded mail"
    parts = mime.attachment_parts(parsed)
    assert [p.content_type for p in parts] == ["message/rfc822", "image/png"]
    assert parts[0].filename.endswith(".eml")
    part_bytes = mime.all_part_bytes(outer.as_bytes())
    assert b"INNER plain" in part_bytes[parts[0].index]
    assert part_bytes[parts[1].index] == b"\x89PNG"


# -- threading and subaddress --------------------------------------------------------------


def test_references_are_read_newest_first_after_in_reply_to() -> None:
    message = EmailMessage()
    message["In-Reply-To"] = "<c@x>"
    message["References"] = "<a@x> <b@x> <c@x>"
    assert mime.references_newest_first(message) == ["<c@x>", "<b@x>", "<a@x>"]


def test_our_message_ids_and_subject_tags_name_the_thread() -> None:
    assert mime.thread_of_our_id("<gwb.a1b2c3d4.1764000000000@example.test>") == "a1b2c3d4"
    assert mime.thread_of_our_id("<gwb.a1b2c3d4@example.test>") is None
    assert mime.subject_tag("Re: [ID:a1b2c3d4] Build") == "a1b2c3d4"
    assert mime.base_subject("Re: RE: Fwd: [ID:a1b2c3d4] Build status") == "Build status"


def test_subaddress_asks_for_a_model() -> None:
    bot = "bot@example.test"
    assert mime.model_hint(["bot+opus@example.test"], bot) == "opus"
    assert mime.model_hint(["bot@example.test"], bot) is None
    assert mime.model_hint(["bot+opus@other.test"], bot) is None
    assert mime.model_hint(["bot+$(rm)@example.test"], bot) is None


def test_reply_threads_under_the_answered_mail() -> None:
    outgoing = Outgoing(
        "bot@example.test",
        "alice@example.test",
        "Build",
        "a1b2c3d4",
        "<m2@x>",
        ("<m1@x>", "<m2@x>"),
    )
    built = build_mail(outgoing, "<gwb.a1b2c3d4.1@example.test>", "**done** <script>", "$0.01")
    assert built["Subject"] == "Re: [ID:a1b2c3d4] Build"
    assert built["In-Reply-To"] == "<m2@x>"
    assert built["References"] == "<m1@x> <m2@x>"
    html = built.get_body(preferencelist=("html",))
    assert html is not None
    assert "<strong>done</strong> &lt;script&gt;" in str(html.get_content()), "agent HTML is text"


# -- authentication -------------------------------------------------------------------------

MX = "mx.example.test"


def _mail(*auth: str, sender: str = "alice@example.test") -> EmailMessage:
    message = EmailMessage()
    for value in auth:
        message["Authentication-Results"] = value
    message["From"] = sender
    return mime.parse_bytes(message.as_bytes())


def _verdict(message: EmailMessage, allow_multiple: bool = False) -> str:
    try:
        check_dmarc(message, single_sender(message), MX, allow_multiple)
    except Refused as exc:
        return exc.reason
    return "pass"


def test_dmarc_pass_from_the_trusted_mx_for_the_from_domain_passes() -> None:
    assert _verdict(_mail(f"{MX}; dmarc=pass header.from=Example.TEST")) == "pass"


@pytest.mark.parametrize(
    "headers",
    [
        [],
        ["mx.other.test; dmarc=pass header.from=example.test"],
        [f"{MX}.evil.test; dmarc=pass header.from=example.test"],
        [f"evil.{MX}; dmarc=pass header.from=example.test"],
        [f"{MX}; dmarc=pass header.from=example.test"] * 2,
        [
            f"{MX}; dmarc=fail header.from=example.test",
            f"{MX}; dmarc=pass header.from=example.test",
        ],
        [f"{MX}; dmarc=fail (dmarc=pass) header.from=example.test"],
        [f"{MX}; spf=pass (dmarc=pass header.from=example.test) smtp.mailfrom=x"],
        [f"{MX}; dmarc=pass header.from=evil.test"],
        [f"{MX}; dmarc=pass header.from=sub.example.test"],
        [f"{MX}; none"],
        ["garbage ;;; ==="],
    ],
    ids=[
        "none",
        "wrong-id",
        "look-alike-suffix",
        "look-alike-prefix",
        "second-trusted-header",
        "pass-below-fail",
        "pass-in-comment",
        "pass-in-spf-comment",
        "other-domain",
        "subdomain",
        "no-results",
        "unparseable",
    ],
)
def test_forged_or_missing_dmarc_is_refused(headers: list[str]) -> None:
    assert _verdict(_mail(*headers)) != "pass"


def test_several_trusted_headers_pass_only_when_the_operator_allows_them() -> None:
    message = _mail(f"{MX}; dmarc=pass header.from=example.test", f"{MX}; spf=pass")
    assert "several" in _verdict(message)
    assert _verdict(message, allow_multiple=True) == "pass"


@pytest.mark.parametrize(
    "value",
    ["alice@example.test, mallory@evil.test", "undisclosed:;", "Friends: a@x.test, b@x.test;"],
)
def test_from_must_hold_exactly_one_mailbox(value: str) -> None:
    message = _mail(f"{MX}; dmarc=pass header.from=example.test", sender=value)
    with pytest.raises(Refused):
        single_sender(message)


def test_a_second_from_header_is_refused() -> None:
    raw = b"From: alice@example.test\r\nFrom: mallory@evil.test\r\nSubject: x\r\n\r\nhi\r\n"
    with pytest.raises(Refused):
        single_sender(mime.parse_bytes(raw))


def test_a_display_name_dressed_as_an_address_does_not_change_the_sender() -> None:
    message = _mail(sender='"alice@example.test" <mallory@evil.test>')
    sender = single_sender(message)
    assert sender.address == "mallory@evil.test"


@pytest.mark.parametrize("value", ["auto-replied", "auto-generated", "Auto-Replied; x"])
def test_automatic_mail_is_never_answered(value: str) -> None:
    message = _mail(f"{MX}; dmarc=pass header.from=example.test")
    message["Auto-Submitted"] = value
    with pytest.raises(Refused):
        check_not_automatic(message, single_sender(message), "bot@example.test")


def test_mail_from_the_bots_own_address_is_never_answered() -> None:
    message = _mail(sender="Bot@Example.test")
    with pytest.raises(Refused):
        check_not_automatic(message, single_sender(message), "bot@example.test")
    message = _mail(sender="alice@example.test")
    message["Auto-Submitted"] = "no"
    check_not_automatic(message, single_sender(message), "bot@example.test")


def test_allowlist_is_exact_or_a_whole_domain() -> None:
    allowed = ["alice@example.test", "*@corp.test"]
    assert is_allowed("Alice@Example.test", allowed)
    assert is_allowed("bob@corp.test", allowed)
    assert not is_allowed("bob@example.test", allowed)
    assert not is_allowed("bob@evilcorp.test", allowed)
    assert not is_allowed("bob@sub.corp.test", allowed)
