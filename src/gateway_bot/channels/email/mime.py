"""A raw mail turned into what the channel needs: its text (``reading``), its threading
references, its attachments, the model asked for by subaddress. Pure functions, no I/O."""

from __future__ import annotations

import email
import email.policy
import re
from dataclasses import dataclass
from email.message import EmailMessage, Message
from email.parser import BytesParser

from gateway_bot.channels.email import markers
from gateway_bot.channels.email.reading import MailText, read_body, walk_parts

_MSGID = re.compile(r"<[\x21-\x3b\x3d\x3f-\x7e]+>")  # printable ASCII: ids go out in headers
_OUR_MSGID = re.compile(r"^<gwb\.([A-Za-z0-9]{6,32})\.[0-9]+@[^<>\s]+>$")  # as tags
_SUBJECT_TAG = re.compile(r"\[ID:([A-Za-z0-9]{6,32})\]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_REPLY_PREFIX = re.compile(r"^\s*((re|fwd?|aw|sv|antw|wg|tr|rv|vs|odp)\s*:\s*)+", re.IGNORECASE)


class TooDeep(Exception):
    """The mail's parts nest deeper than Python's email package can walk (its parser,
    ``get_body`` and ``as_bytes`` recurse once per level: a 50 kB mail of a thousand nested
    multiparts or attached mails exhausts the stack). It is answered, not dropped."""


def parse_bytes(raw: bytes) -> EmailMessage:
    """The whole mail; TooDeep when its parts nest beyond what can be read."""
    try:
        message = email.message_from_bytes(raw, policy=email.policy.default)
    except RecursionError as exc:
        raise TooDeep from exc
    assert isinstance(message, EmailMessage)
    return message


def parse_headers(raw: bytes) -> EmailMessage:
    """Only the top-level headers (who sent it, its threading), the body left unread: what
    a mail too deep to parse can still be authenticated and answered by."""
    message = BytesParser(policy=email.policy.default).parsebytes(raw, headersonly=True)
    assert isinstance(message, EmailMessage)
    return message


@dataclass(frozen=True)
class Contents:
    body: MailText
    attachments: list[PartRef]


def contents(message: EmailMessage) -> Contents:
    """Text and attachments; TooDeep when walking them exhausts the stack (an attached
    mail is re-serialised to measure it, a level per nesting)."""
    try:
        body = read_body(message, markers.is_forward_subject(str(message.get("Subject") or "")))
        return Contents(body, attachment_parts(message, set(body.parts)))
    except RecursionError as exc:
        raise TooDeep from exc


@dataclass(frozen=True)
class PartRef:
    """An attachment: its index among the message's walked parts, for fetching later."""

    index: int
    filename: str
    content_type: str
    size: int


def body_text(message: EmailMessage) -> str:
    """The sender's words as the agent reads them (see ``reading``)."""
    return read_body(message, markers.is_forward_subject(str(message.get("Subject") or ""))).text


def _is_attachment(part: Message) -> bool:
    """A file: an attached mail, or a part marked as an attachment or named (an unnamed
    inline image is a signature logo, and no file the sender means)."""
    if part.get_content_type() == "message/rfc822":
        return True
    if part.is_multipart():
        return False
    disposition = (part.get_content_disposition() or "").lower()
    return disposition == "attachment" or bool(part.get_filename())


def attachment_parts(message: EmailMessage, text_indexes: set[int] | None = None) -> list[PartRef]:
    """Files the sender attached (named inline images included; an attached mail as one
    ``.eml`` file); never a part read as the mail's text (``text_indexes``)."""
    if text_indexes is None:
        text_indexes = set(read_body(message, False).parts)
    found = []
    for index, part in enumerate(walk_parts(message)):
        if index == 0 or index in text_indexes or not _is_attachment(part):
            continue
        data = _bytes_of(part)
        default = f"attachment-{index}" + (
            ".eml" if part.get_content_type() == "message/rfc822" else ""
        )
        found.append(
            PartRef(
                index=index,
                filename=str(part.get_filename() or default),
                content_type=part.get_content_type(),
                size=len(data),
            )
        )
    return found


def _bytes_of(part: Message) -> bytes:
    if part.get_content_type() == "message/rfc822":
        inner = part.get_payload()
        if isinstance(inner, list) and inner and isinstance(inner[0], Message):
            return inner[0].as_bytes()
        return b""
    payload = part.get_payload(decode=True)
    return payload if isinstance(payload, bytes) else b""


def all_part_bytes(raw: bytes) -> list[bytes]:
    """Every walked part's bytes, by the index ``attachment_parts`` gave (one walk for all
    of a mail's attachments, not one per attachment)."""
    return [_bytes_of(part) for part in walk_parts(parse_bytes(raw))]


# -- threading ---------------------------------------------------------------------------


def message_ids(value: str | None) -> list[str]:
    return _MSGID.findall(value or "")


def references_newest_first(message: EmailMessage) -> list[str]:
    """In-Reply-To first, then References from the newest (last) to the oldest."""
    found: list[str] = []
    for msgid in message_ids(str(message.get("In-Reply-To") or "")):
        if msgid not in found:
            found.append(msgid)
    for msgid in reversed(message_ids(str(message.get("References") or ""))):
        if msgid not in found:
            found.append(msgid)
    return found


def thread_of_our_id(msgid: str) -> str | None:
    """The thread key inside one of our Message-IDs (``<gwb.{thread}.{ts}@domain>``)."""
    match = _OUR_MSGID.match(msgid)
    return match.group(1) if match else None


def subject_tag(subject: str) -> str | None:
    match = _SUBJECT_TAG.search(subject)
    return match.group(1) if match else None


def is_reply_subject(subject: str) -> bool:
    """``Re:``, ``AW:``, ``SV:``... in front: a reply, whose subject is its thread's."""
    return bool(_REPLY_PREFIX.match(subject)) and not markers.is_forward_subject(subject)


def base_subject(subject: str) -> str:
    """The subject without Re:/Fwd: prefixes and our tag, for ``Re: [ID:x] original``."""
    cleaned = _SUBJECT_TAG.sub("", subject)
    cleaned = _REPLY_PREFIX.sub("", cleaned.strip())
    cleaned = _SUBJECT_TAG.sub("", cleaned)
    cleaned = _CONTROL.sub(" ", cleaned)  # it goes out in our Subject: no NUL, no ESC
    return " ".join(cleaned.split()) or "(no subject)"


def model_hint(recipients: list[str], bot_address: str) -> str | None:
    """``bot+opus@domain`` asks for model ``opus`` when a conversation starts."""
    local, _, domain = bot_address.lower().partition("@")
    for recipient in recipients:
        r_local, _, r_domain = recipient.lower().partition("@")
        if r_domain != domain or not r_local.startswith(local + "+"):
            continue
        detail = r_local[len(local) + 1 :]
        if re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,63}", detail):
            return detail
    return None


def recipients_of(message: EmailMessage) -> list[str]:
    found: list[str] = []
    for name in ("To", "Cc", "Delivered-To", "X-Original-To"):
        for header in message.get_all(name) or []:
            for address in getattr(header, "addresses", ()):
                if address.username and address.domain:
                    found.append(f"{address.username}@{address.domain}")
    return found
