"""What the agent reads of a mail: the text parts a mail client shows, each decoded,
its hidden words and invisible characters removed, its quoted history cut; and what could
not be read, said rather than dropped. Pure functions: bytes in, text out.

Which parts are the text: of a ``multipart/alternative``, the HTML one (or the branch that
holds it), else the plain one; of a ``multipart/related``, its root; of a
``multipart/mixed``, every text part that is not a file, in order. Apple Mail sends text
around an inline image as ``text/html``, ``image/png``, ``text/html``: all of it is the
person's text, not only the first part. A ``text/*`` part with a file name, or marked as an
attachment, is a file (saved to the agent's inbox), and an attached mail is one ``.eml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from email.message import EmailMessage, Message

from gateway_bot.channels.email import charsets
from gateway_bot.channels.email.plain_quotes import read_plain
from gateway_bot.channels.email.quotes import MAX_HTML_CHARS, REMOVED, UNSURE, PartText, read_html
from gateway_bot.channels.email.visibility import strip_invisible

TNEF = (
    "your mail's text came in Outlook's winmail.dat format (rich text sent to a client "
    "that is not Outlook), which I cannot read; send it again as HTML or plain text"
)


@dataclass(frozen=True)
class MailText:
    text: str
    """The sender's words: quotes cut (``[quoted text removed]``), forwards kept."""
    hidden_removed: bool = False
    """Hidden words or invisible characters that could carry words were removed."""
    left_out: tuple[str, ...] = ()
    """Sentences for the sender (and the agent) about what could not be read."""
    whole: str | None = None
    """When no words of the sender's own could be told from the quote: everything, quoted."""
    parts: tuple[int, ...] = field(default=(), compare=False)
    """Indexes (among the walked parts) of the parts read as text: never attachments."""


def read_body(message: EmailMessage, forward: bool) -> MailText:
    """The mail's text (``forward``: its subject says it forwards a mail)."""
    chosen = text_parts(message)
    indexes = {id(part): index for index, part in enumerate(walk_parts(message))}
    read: list[PartText] = []
    problems: list[str] = []
    for part in chosen:
        payload = part.get_payload(decode=True)
        raw = payload if isinstance(payload, bytes) else str(part.get_payload()).encode()
        decoded = charsets.decode(raw, part.get_content_charset())
        if decoded.problem and decoded.problem not in problems:
            problems.append(decoded.problem)
        if part.get_content_subtype() == "html":
            found = read_html(decoded.text, forward)
        else:
            found = read_plain(decoded.text, forward)
        read.append(found)
        if found.problem and found.problem not in problems:
            problems.append(found.problem)
    if not chosen and any(
        p.get_content_type() == "application/ms-tnef" for p in walk_parts(message)
    ):
        problems.append(TNEF)
    text, hidden = _joined(part.text for part in read)
    whole = None
    if _own_words(text) == "" and any(part.whole for part in read):
        whole, more_hidden = _joined(part.whole or part.text for part in read)
        hidden |= more_hidden
    return MailText(
        text,
        hidden or any(part.hidden_removed for part in read),
        tuple(problems),
        whole,
        tuple(indexes[id(part)] for part in chosen if id(part) in indexes),
    )


def _joined(texts: object) -> tuple[str, bool]:
    cleaned: list[str] = []
    suspicious = False
    for text in texts:  # type: ignore[attr-defined]
        visible, hidden = strip_invisible(str(text))
        suspicious |= hidden
        if visible.strip():
            cleaned.append(visible.strip())
    return "\n\n".join(cleaned), suspicious


def _own_words(text: str) -> str:
    return text.replace(REMOVED, "").strip()


def whole_note() -> str:
    return UNSURE


# -- which parts are the text ----------------------------------------------------------------


def walk_parts(message: Message) -> list[Message]:
    """Every part in document order, without descending into attached mails (a
    message/rfc822 part is one attachment, not a source of more). Iterative: a mail of a
    thousand nested parts must not exhaust the stack here."""
    found: list[Message] = []
    stack: list[Message] = [message]
    while stack:
        part = stack.pop()
        found.append(part)
        if part.get_content_type() == "message/rfc822" or not part.is_multipart():
            continue
        children = [child for child in part.get_payload() if isinstance(child, Message)]
        stack.extend(reversed(children))
    return found


def text_parts(message: Message) -> list[Message]:
    """The parts a mail client shows as the mail's text, in order."""
    chosen: list[Message] = []
    stack: list[Message] = [message]
    while stack:
        part = stack.pop()
        if part.is_multipart():
            children = [child for child in part.get_payload() if isinstance(child, Message)]
            subtype = part.get_content_subtype()
            if part.get_content_type() == "message/rfc822" or not children:
                continue
            if subtype == "alternative":
                stack.append(_best_alternative(children))
            elif subtype in ("related", "signed"):
                stack.append(children[0])
            else:
                stack.extend(reversed(children))
        elif _is_text(part):
            chosen.append(part)
    return chosen


def _is_text(part: Message) -> bool:
    if part.get_content_type() not in ("text/plain", "text/html"):
        return False
    disposition = (part.get_content_disposition() or "").lower()
    return disposition != "attachment" and not part.get_filename()


def _best_alternative(children: list[Message]) -> Message:
    """The HTML branch, unless its HTML is too big to read, then the plain one; else the
    last alternative (the richest, by RFC 2046)."""
    html = [child for child in children if _holds(child, "text/html")]
    plain = [child for child in children if _holds(child, "text/plain")]
    if html and not (plain and _too_big(html[-1])):
        return html[-1]
    if plain:
        return plain[-1]
    return children[-1]


def _holds(part: Message, content_type: str) -> bool:
    if part.is_multipart():
        return any(_holds(child, content_type) for child in text_parts(part))
    return part.get_content_type() == content_type and _is_text(part)


def _too_big(part: Message) -> bool:
    for leaf in text_parts(part):
        payload = leaf.get_payload(decode=True)
        if isinstance(payload, bytes) and len(payload) > MAX_HTML_CHARS:
            return True
    return False
