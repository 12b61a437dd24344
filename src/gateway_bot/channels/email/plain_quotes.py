"""A plain-text reply's own words: the history under a reply header cut (mail-parser-reply
knows the "On ... wrote:" and ``From:/Sent:`` headers of many languages), inline answers
kept with the ``> `` lines they answer, the quoted lines after the last answer dropped, and
a forward kept whole (the forwarded mail is what the request is about)."""

from __future__ import annotations

from mailparser_reply import EmailReplyParser

from gateway_bot.channels.email import markers
from gateway_bot.channels.email.quotes import REMOVED, PartText

_LANGUAGES = ["en", "de", "fr", "es", "it", "nl", "sv", "da", "pl", "cs", "ja", "zh", "ko"]


def plain_to_text(text: str) -> str:
    return read_plain(text).text


def read_plain(text: str, forward: bool = False) -> PartText:
    """The new words of a plain-text part (``forward``: its subject says it forwards)."""
    text = text.replace("\r\n", "\n").strip()
    if not text:
        return PartText("")
    if forward or _forward_marker_before_quotes(text):
        return PartText(text)
    separator = markers.SEPARATOR.search(text)
    if separator is not None:  # Outlook's plain separator: the rest is the old mail
        head = text[: separator.start()].strip()
        if head:
            return PartText(f"{head}\n\n{REMOVED}")
    try:
        replies = EmailReplyParser(languages=_LANGUAGES).read(text).replies
    except Exception:  # a parser bug must not lose the mail: keep it whole
        return PartText(text)
    if not replies:
        return PartText(text)
    kept = [_drop_trailing_separator(replies[0].content.strip())]
    removed = False
    for reply in replies[1:]:
        if _is_inline(reply.body):
            heading = reply.headers.strip()
            kept.append(f"{heading}\n{reply.body.strip()}" if heading else reply.body.strip())
        else:
            removed = True
    joined = "\n\n".join(part for part in kept if part)
    stripped, trailing = _strip_trailing_quote(joined)
    if not stripped.strip():  # nothing of the sender's own found: the whole, if need be
        return PartText(REMOVED, whole=text) if trailing or removed else PartText("")
    if trailing or removed:
        return PartText(f"{stripped}\n\n{REMOVED}")
    return PartText(stripped)


def _forward_marker_before_quotes(text: str) -> bool:
    """A forward marker before any ``>`` line or reply header: the mail forwards."""
    found = markers.FORWARD.search(text)
    if found is None:
        return False
    before = text[: found.start()]
    return not any(line.lstrip().startswith(">") for line in before.splitlines())


def _drop_trailing_separator(text: str) -> str:
    lines = text.rstrip().splitlines()
    while lines and (markers.SEPARATOR.match(lines[-1]) or not lines[-1].strip()):
        lines.pop()
    return "\n".join(lines)


def _is_inline(body: str) -> bool:
    """Quoted lines with the sender's own lines after at least one of them."""
    lines = [line for line in body.splitlines() if line.strip()]
    quoted = [i for i, line in enumerate(lines) if line.lstrip().startswith(">")]
    if not quoted:
        return False
    return any(not lines[i].lstrip().startswith(">") for i in range(quoted[0], len(lines)))


def _strip_trailing_quote(text: str) -> tuple[str, bool]:
    """Quoted lines after the last line of the sender's own are history (a mutt or Apple
    Mail inline answer leaves the rest of the old mail under it)."""
    lines = text.splitlines()
    end = len(lines)
    while end and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith(">")):
        end -= 1
    trailing = any(line.lstrip().startswith(">") for line in lines[end:])
    kept = lines[:end]
    if kept and _is_attribution(kept[-1]):  # "On ... wrote:" over nothing but history
        kept.pop()
    return "\n".join(kept).strip(), trailing


def _is_attribution(line: str) -> bool:
    return markers.ATTRIBUTION.search(line) is not None
