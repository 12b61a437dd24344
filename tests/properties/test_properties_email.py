"""Property-based attacks on the mail body pipeline, conversation-id resolution and file
names (hypothesis).

A mail is bytes a stranger chose. Whatever they hold, parsing and the body pipeline must
answer with text (never an exception that would stall intake), quoted history under a
client's quote marker must never reach the agent, a reply's subject and Message-ID must
lead back to exactly the thread they were made for (a tag the sender typed never wins over
ours), and an attachment's name must come out as one plain file name.
"""

from __future__ import annotations

import re

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway_bot.channels.email.compose import new_message_id, reply_subject
from gateway_bot.channels.email.mime import (
    base_subject,
    body_text,
    parse_bytes,
    subject_tag,
    thread_of_our_id,
)
from gateway_bot.channels.email.quotes import html_to_text
from gateway_bot.core.workspaces.inbox_files import safe_filename

_HEADER_PIECES = [
    b"From: a@example.org\r\n",
    b"From: =?utf-8?b?ZXZpbA==?= <b@example.org>\r\n",
    b"Subject: =?big5?q?=A4=A4?=\r\n",
    b"Content-Type: text/html; charset=big5\r\n",
    b"Content-Type: text/plain; charset=x-unknown\r\n",
    b"Content-Type: multipart/alternative; boundary=b\r\n",
    b"Content-Type: multipart/mixed; boundary=\r\n",
    b"Content-Transfer-Encoding: base64\r\n",
    b"Content-Transfer-Encoding: quoted-printable\r\n",
    b"Content-Disposition: attachment; filename*=utf-8''..%2F..%2Fetc%2Fpasswd\r\n",
    b"X-Long: " + b"a" * 2000 + b"\r\n",
    b" folded continuation\r\n",
    b"\r\n",
]
_BODY_PIECES = [
    b"--b\r\n",
    b"--b--\r\n",
    b"<html><body><p>hi</p>",
    b"<div class=gmail_quote>old</div>",
    b"<blockquote type=cite>",
    b"<" * 50,
    b"<div>" * 300,
    b"=E4=B8=AD",
    b"=\r\n",
    b"aGVsbG8=\r\n",
    b"!!!notbase64",
    b"\xa4\xa4\xff\xfe\x00",
    b"> quoted\r\n",
    b"On Mon, Bob wrote:\r\n",
    b"text\r\n",
]
mails = st.tuples(
    st.lists(st.sampled_from(_HEADER_PIECES), max_size=8),
    st.lists(st.sampled_from(_BODY_PIECES), max_size=12),
).map(lambda parts: b"".join(parts[0]) + b"\r\n" + b"".join(parts[1]))


@settings(max_examples=150, deadline=None)
@given(mails | st.binary(max_size=2000))
@example(b"Content-Type: text/html; charset=big5\r\n\r\n<p>\xa4\xa4\xa4\xe5</p>")
def test_any_bytes_give_a_body_text(raw: bytes) -> None:
    assert isinstance(body_text(parse_bytes(raw)), str)


new_words = st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta"]), min_size=1, max_size=6)
old_words = st.lists(st.sampled_from(["OLDONE", "OLDTWO", "OLDTHREE"]), min_size=1, max_size=6)
_QUOTE_MARKERS = [
    '<div class="gmail_quote">{}</div>',
    '<div id="mail-editor-reference-message-container">{}</div>',
    '<div class="yahoo_quoted">{}</div>',
    '<blockquote type="cite">{}</blockquote>',
    '<div id="divRplyFwdMsg">From: x</div><div>{}</div>',
]


@settings(deadline=None)
@given(new_words, old_words, st.sampled_from(_QUOTE_MARKERS))
def test_quoted_history_under_a_client_marker_never_reaches_the_agent(
    new: list[str], old: list[str], marker: str
) -> None:
    html = f"<html><body><div>{' '.join(new)}</div>{marker.format(' '.join(old))}</body></html>"
    text = html_to_text(html)
    assert not re.search(r"OLD(ONE|TWO|THREE)", text), text
    assert all(word in text for word in new), text


threads = st.from_regex(r"[A-Za-z0-9]{6,32}", fullmatch=True)


@given(threads, st.text(max_size=120))
@example("abcdef12", "Re: [ID:zzzzzzzz] hijack")
@example("abcdef12", "[ID:zzzzzzzz] Re: [ID:yyyyyyyy] x")
def test_a_reply_subject_leads_back_to_its_own_thread(thread: str, subject: str) -> None:
    made = reply_subject(thread, base_subject(subject))
    assert subject_tag(made) == thread
    assert not re.search(r"[\x00-\x1f\x7f]", made)


@given(threads, st.sampled_from(["example.org", "mail.example.test"]))
def test_our_message_id_leads_back_to_its_thread(thread: str, domain: str) -> None:
    assert thread_of_our_id(new_message_id(thread, domain)) == thread


@given(st.text(max_size=60))
@example("<gwb.abcdef12.1@evil.example> <x@y>")
def test_only_our_own_message_id_shape_names_a_thread(text: str) -> None:
    found = thread_of_our_id(text)
    if found is not None:
        assert re.fullmatch(r"<gwb\.[A-Za-z0-9]{6,32}\.[0-9]+@[^<>\s]+>", text)


@given(
    st.lists(
        st.sampled_from(["..", "/", "\\", ".", "etc", "passwd", "\x00", "con", " ", "é", "a" * 80]),
        max_size=8,
    ).map("".join)
    | st.text(max_size=300)
)
@example("../../etc/passwd")
@example("..\\..\\windows\\system32")
@example(".bashrc")
def test_an_attachment_name_becomes_one_plain_file_name(name: str) -> None:
    safe = safe_filename(name)
    assert re.fullmatch(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]{0,99}", safe), (name, safe)
