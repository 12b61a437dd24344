"""A reply's own words: quoted history cut by mail client family, inline answers kept.

Every client quotes differently. HTML mail marks the quote with the client's own element
(Gmail ``gmail_quote``, Outlook on the web ``mail-editor-reference-message-container``,
Outlook desktop's ``divRplyFwdMsg`` header, after which everything is the old mail, Yahoo
``yahoo_quoted``, Thunderbird and Apple Mail ``blockquote type=cite`` with Thunderbird's
``moz-cite-prefix`` "On ... wrote:" line). Plain text goes through mail-parser-reply.

Two shapes matter to the agent: a trailing quote (the whole earlier mail under the answer)
is history it already has, so it becomes ``[quoted text removed]``; an inline reply
(answers between quoted lines) is kept with the quotes as ``> `` lines, or the answers lose
their questions. Signatures are kept: they can matter (a name, a phone number).
"""

from __future__ import annotations

import re
from html import unescape

from bs4 import BeautifulSoup, Tag
from bs4.element import NavigableString
from mailparser_reply import EmailReplyParser
from markdownify import markdownify

REMOVED = "[quoted text removed]"
MAX_HTML_CHARS = 200_000
"""HTML longer than this is not given to BeautifulSoup and the converter, which take
seconds to minutes on big or hostile markup (a 90,000-cell table: 13 s) while intake
waits: its tags are stripped instead (``flat_text``), or the plain alternative is read."""

_QUOTE_SELECTORS = (
    "div.gmail_quote",
    "blockquote.gmail_quote",
    "div.gmail_quote_container",
    "#mail-editor-reference-message-container",
    ".mail-editor-reference-message-container",
    "div.yahoo_quoted",
    "blockquote[type=cite]",
)
_PREFIX_SELECTORS = ("div.moz-cite-prefix", "div.gmail_attr")
_OUTLOOK_BOUNDARY = "#divRplyFwdMsg"


def html_to_text(html: str) -> str:
    """The new text of an HTML mail as markdown-like text; markup too big or too deeply
    nested to convert (the converter recurses per element) yields its bare text."""
    if len(html) > MAX_HTML_CHARS:
        return flat_text(html)
    try:
        return _convert(html)
    except Exception:  # RecursionError on deep markup, or a converter bug: keep the words
        return flat_text(html)


_SCRIPT = re.compile(r"<(script|style|head|title)\b.*?(?:</\1\s*>|\Z)", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^<>]*>")  # not [^>]: a run of "<" without ">" would be quadratic


def flat_text(html: str) -> str:
    """The words of any markup in one linear pass: no tree, no recursion, no quote cutting."""
    text = _TAG.sub(" ", _SCRIPT.sub(" ", html))
    return _tidy("\n".join(" ".join(line.split()) for line in unescape(text).splitlines()))


def _convert(html: str) -> str:
    soup = BeautifulSoup(html, "html.parser")
    for element in soup(["script", "style", "head", "title"]):
        element.decompose()
    removed = _cut_outlook_history(soup)
    quotes = _outermost(soup, _QUOTE_SELECTORS)
    inline = _answered_after(quotes)
    for quote in quotes:
        if inline:
            quote.name = "blockquote"
            quote.attrs = {}
        else:
            _drop_prefix_of(quote)
            quote.decompose()
            removed = True
    text = markdownify(str(soup), heading_style="ATX", bullets="-", strip=["img"])
    text = _tidy(text)
    return f"{text}\n\n{REMOVED}" if removed and text else (text or (REMOVED if removed else ""))


def _cut_outlook_history(soup: BeautifulSoup) -> bool:
    """Outlook desktop puts a header block (From/Sent/To/Subject) before the old mail: it
    and everything after it in document order is history."""
    boundary = soup.select_one(_OUTLOOK_BOUNDARY)
    if boundary is None:
        return False
    previous = boundary.find_previous_sibling()
    if isinstance(previous, Tag) and previous.name == "hr":
        previous.extract()
    for node in list(boundary.next_elements):
        node.extract()
    boundary.extract()
    return True


def _outermost(soup: BeautifulSoup, selectors: tuple[str, ...]) -> list[Tag]:
    """Quote elements not inside another one, in document order (by identity: bs4
    compares elements by content, and walking each found quote again was quadratic)."""
    found: list[Tag] = []
    taken: set[int] = set()
    for element in soup.select(", ".join(selectors)):
        if not any(id(parent) in taken for parent in element.parents):
            found.append(element)
            taken.add(id(element))
    return found


def _answered_after(quotes: list[Tag]) -> bool:
    """Words after the first quote that are in no quote: the sender answered below one.
    One pass over the strings (every later quote is after the first one too)."""
    if not quotes:
        return False
    taken = {id(quote) for quote in quotes}
    for string in quotes[0].find_all_next(string=True):
        if not isinstance(string, NavigableString) or not string.strip():
            continue
        if any(id(parent) in taken for parent in string.parents):
            continue
        if _is_signature(string):
            continue
        return True
    return False


def _is_signature(string: NavigableString) -> bool:
    for parent in string.parents:
        classes = [str(name) for name in parent.get_attribute_list("class") if name]
        if any("signature" in name.lower() for name in classes):
            return True
        if str(parent.get("id") or "").lower().startswith("signature"):
            return True
    return False


def _drop_prefix_of(quote: Tag) -> None:
    """The "On ... wrote:" line just before a quote goes with it."""
    previous = quote.find_previous_sibling()
    if not isinstance(previous, Tag):
        return
    classes = [str(name) for name in previous.get_attribute_list("class") if name]
    is_prefix = any(name in ("moz-cite-prefix", "gmail_attr") for name in classes)
    if is_prefix or previous.select_one(", ".join(_PREFIX_SELECTORS)) is not None:
        previous.decompose()


def _tidy(text: str) -> str:
    lines = [line.rstrip() for line in text.replace("\xa0", " ").splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


# -- plain text ---------------------------------------------------------------------------


def plain_to_text(text: str) -> str:
    """The new text of a plain-text mail: later replies the parser found are dropped unless
    they carry answers between quoted lines (an inline reply), which are kept as they are."""
    text = text.replace("\r\n", "\n")
    try:
        replies = EmailReplyParser(languages=["en", "de", "fr", "es"]).read(text).replies
    except Exception:  # a parser bug must not lose the mail: keep it whole
        return text.strip()
    if not replies:
        return text.strip()
    kept = [replies[0].content.strip()]
    removed = False
    for reply in replies[1:]:
        if _is_inline(reply.body):
            heading = reply.headers.strip()
            kept.append(f"{heading}\n{reply.body.strip()}" if heading else reply.body.strip())
        else:
            removed = True
    first = "\n\n".join(part for part in kept if part)
    if _is_inline(first):
        return first
    stripped, trailing = _strip_trailing_quote(first)
    if trailing or removed:
        return f"{stripped}\n\n{REMOVED}" if stripped else REMOVED
    return stripped


def _is_inline(body: str) -> bool:
    """Quoted lines with the sender's own lines after at least one of them."""
    lines = [line for line in body.splitlines() if line.strip()]
    quoted = [i for i, line in enumerate(lines) if line.lstrip().startswith(">")]
    if not quoted:
        return False
    return any(not lines[i].lstrip().startswith(">") for i in range(quoted[0], len(lines)))


def _strip_trailing_quote(text: str) -> tuple[str, bool]:
    lines = text.splitlines()
    end = len(lines)
    while end and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith(">")):
        end -= 1
    trailing = any(line.lstrip().startswith(">") for line in lines[end:])
    return "\n".join(lines[:end]).strip(), trailing
