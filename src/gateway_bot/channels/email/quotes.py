"""A reply's own words from its HTML: quoted history cut, inline answers kept with their
questions, a forward kept whole, hidden text gone.

Every client marks the quoted mail its own way (see ``tests/corpus/mail_text/README.md``):

- a container holding the old mail: Gmail ``div.gmail_quote`` (its ``gmail_attr`` "On ...
  wrote:" line and ``blockquote.gmail_quote``), Yahoo ``yahoo_quoted``, Outlook on the
  web ``mail-editor-reference-message-container``, Apple Mail and Thunderbird
  ``blockquote type=cite`` (Thunderbird's ``moz-cite-prefix`` line before it), Thunderbird's
  ``moz-forward-container``;
- a point after which everything is the old mail: Outlook's ``divRplyFwdMsg`` header, a
  header block (``From:/Sent:/To:/Subject:`` in the client's language, Outlook desktop's
  Word-style top border or none), a separator line (``-----Original Message-----``,
  ``-----Ursprüngliche Nachricht-----``...). Everything from there is gathered into one
  container.

Then, per mail: a forward (by subject prefix or a forward marker) keeps its containers as
text, since the forwarded mail is what the request is about. A reply whose person answered
inside or between the quoted parts keeps them: quoted lines as ``> ``, the answers as they
are. Answers are the words outside the quote elements of a container (Gmail splits its
blockquote around them; Apple Mail and Thunderbird put them between blockquotes), and,
inside the most recent quoted mail, words typed in a colour of their own (how Outlook and
Yahoo users answer inline). Quoted lines after the last answer are history and go. A reply
with no answers loses its containers (``[quoted text removed]``). A reply in which no words
of the sender's own can be found keeps the whole quote and says it could not tell them
apart (``unsure``), rather than answering an empty mail.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from bs4 import BeautifulSoup, Tag
from bs4.element import NavigableString, PageElement
from markdownify import markdownify

from gateway_bot.channels.email import markers
from gateway_bot.channels.email.visibility import chroma_of, strip_hidden

REMOVED = "[quoted text removed]"
MAX_HTML_CHARS = 200_000
"""HTML longer than this is not given to BeautifulSoup and the converter, which take
seconds to minutes on big or hostile markup (a 90,000-cell table: 13 s) while intake waits.
Its words are not read either (what is hidden in it cannot be told without the tree): the
sender's plain alternative is read, or the sender told."""

UNSURE = "I could not tell your words from the mail you quoted, so all of it is given as quoted"
TOO_BIG = "the HTML of your mail is too large to read safely, and it had no plain-text version"

_CONTAINERS = (
    "div.gmail_quote",
    "div.gmail_quote_container",
    "blockquote.gmail_quote",
    "[class*=yahoo_quoted]",
    "#mail-editor-reference-message-container",
    ".mail-editor-reference-message-container",
    "blockquote[type=cite]",
    "div.moz-forward-container",
    "div.gwb-history",
)
_WRAPPERS = ("gmail_quote", "gmail_quote_container")
"""Containers whose quote proper is the blockquote inside: words beside it are answers."""
_PREFIXES = ("moz-cite-prefix", "gmail_attr")
_ANSWER_CHROMA = 0.35
_A_OPEN, _A_CLOSE, _Q_OPEN, _Q_CLOSE = "\ufff0", "\ufff1", "\ufff2", "\ufff3"
_SENTINELS = re.compile("[\ufff0-\ufff3]")
T = TypeVar("T")


@dataclass(frozen=True)
class PartText:
    """What one text part of a mail says."""

    text: str
    hidden_removed: bool = False
    whole: str | None = None
    """Set when no words of the sender's own could be told from the quote: the whole part,
    quoted, to read instead if the mail has nothing else (see ``UNSURE``)."""
    problem: str | None = None
    """What the sender is told could not be read."""


def html_to_text(html: str) -> str:
    return read_html(html).text


def read_html(html: str, forward: bool = False) -> PartText:
    """The new words of an HTML mail as markdown-like text (``forward``: its subject says
    it forwards a mail)."""
    if len(html) > MAX_HTML_CHARS:
        return PartText("", problem=TOO_BIG)
    soup = BeautifulSoup(_SENTINELS.sub("", html), "html.parser")
    hidden = strip_hidden(soup)
    _gather_flat_history(soup)
    containers = _outermost(soup)
    if forward or _forwards(containers):
        for container in containers:
            container.name, container.attrs = "div", {}
        return PartText(_render(soup), hidden)
    answers = _answers(containers)
    if not answers and not _answered_after(soup, containers):
        text = _without(soup, containers)
        if text.strip() or not containers:
            return PartText(_with_removed(text, bool(containers)), hidden)
        _mark(containers, set())  # no words of the sender's own: all of it, as quoted
        whole = _quoted_lines(_render(soup), keep_trailing=True)
        return PartText(REMOVED, hidden, whole=whole)
    _mark(containers, answers)
    return PartText(_quoted_lines(_render(soup), keep_trailing=False), hidden)


def _render(soup: BeautifulSoup) -> str:
    try:
        text = markdownify(
            str(soup),
            heading_style="ATX",
            bullets="-",
            strip=["img"],
            escape_underscores=False,  # test_api.py, snake_case: code words stay as typed
            escape_asterisks=False,
        )
    except RecursionError:  # markup nested deeper than the converter recurses: its words
        text = soup.get_text("\n")
    return _tidy(text)


def _without(soup: BeautifulSoup, containers: list[Tag]) -> str:
    for container in containers:
        container.extract()
    text = _render(soup)
    for container in containers:  # put back, in order: the caller may still want them
        soup.append(container)
    return text


def _forwards(containers: list[Tag]) -> bool:
    """The first container opens with a forward marker (``Begin forwarded message:``,
    Gmail's ``---------- Forwarded message ---------``) or is Thunderbird's forward. Only
    the first: a reply quoting an older forward is still a reply."""
    if not containers:
        return False
    first = containers[0]
    if "moz-forward-container" in first.get_attribute_list("class"):
        return True
    return markers.FORWARD.search(first.get_text("\n")[:400]) is not None


def _with_removed(text: str, removed: bool) -> str:
    if not removed:
        return text
    return f"{text}\n\n{REMOVED}" if text else REMOVED


# -- where the history is -----------------------------------------------------------------


def _gather_flat_history(soup: BeautifulSoup) -> None:
    """Move the first Outlook-style history point and everything after it, in document
    order, into one ``div.gwb-history`` at the end."""
    marker = _first_flat_marker(soup)
    if marker is None:
        return
    history = soup.new_tag("div", attrs={"class": "gwb-history"})
    previous = marker.find_previous_sibling()
    moved: list[PageElement] = [marker]
    if isinstance(previous, Tag) and previous.name == "hr":
        previous.decompose()
    node: Tag | None = marker
    while node is not None and node is not soup:
        moved.extend(node.next_siblings)
        node = node.parent
    for element in moved:
        history.append(element.extract())
    soup.append(history)


def _first_flat_marker(soup: BeautifulSoup) -> Tag | None:
    """The first of: Outlook's ``divRplyFwdMsg``, a separator line, a header block, that
    is in no container. Strings are tested by regex first; only a match walks up."""
    containers = {id(found) for found in soup.select(", ".join(_CONTAINERS))}
    for string, inside in _strings(
        soup, lambda tag, inside: inside or id(tag) in containers, False
    ):
        if inside:
            continue
        outlook = _outlook_header_of(string)
        if outlook is not None:
            return outlook
        if markers.SEPARATOR.match(string) or markers.FROM_LINE.match(string):
            block = _block_starting_with(string, soup)
            if block is not None:
                return block
    return None


def _outlook_header_of(string: NavigableString) -> Tag | None:
    for level, ancestor in enumerate(string.parents):
        if level > 6:
            return None
        if str(ancestor.get("id") or "").endswith("divRplyFwdMsg"):
            return ancestor
    return None


def _block_starting_with(string: NavigableString, soup: BeautifulSoup) -> Tag | None:
    """The largest element (a few levels up at most) whose text starts at ``string`` and
    is a separator or a header block."""
    found = None
    for level, ancestor in enumerate(string.parents):
        if level > 6 or ancestor is soup or ancestor.name in ("body", "html"):
            break
        text = ancestor.get_text("\n")
        if not text.lstrip().startswith(string.strip()[:40]):
            break
        if markers.SEPARATOR.match(text) or markers.is_header_block(text):
            found = ancestor
    return found


def _outermost(soup: BeautifulSoup) -> list[Tag]:
    """Containers not inside another one, in document order (by identity: bs4 compares
    elements by content)."""
    found: list[Tag] = []
    taken: set[int] = set()
    for element in soup.select(", ".join(_CONTAINERS)):
        if not any(id(parent) in taken for parent in element.parents):
            found.append(element)
            taken.add(id(element))
    for container in found:  # Thunderbird's "On ... wrote:" line goes with its quote
        previous = container.find_previous_sibling()
        if isinstance(previous, Tag) and _is_prefix(previous):
            container.insert(0, previous.extract())
    return found


def _is_prefix(element: Tag) -> bool:
    classes = [str(name) for name in element.get_attribute_list("class") if name]
    return any(name in _PREFIXES for name in classes)


# -- the sender's own words ---------------------------------------------------------------


@dataclass(frozen=True)
class _Where:
    """What a string is inside, handed down the walk."""

    quoted: bool = False
    link: bool = False
    colour: str | None = None


def _answers(containers: list[Tag]) -> set[int]:
    """Strings in containers that the sender wrote: beside a wrapper's blockquote, or in
    a colour of their own within the most recent quoted mail."""
    found: set[int] = set()
    for container in containers:
        classes = {str(name) for name in container.get_attribute_list("class") if name}
        wrapper = (
            bool(classes & set(_WRAPPERS))
            and container.name == "div"
            and container.find("blockquote") is not None
        )
        base = chroma_of(_colour_at(container))

        def enter(tag: Tag, where: _Where) -> _Where:
            return _Where(
                where.quoted or tag.name == "blockquote" or _is_prefix(tag),
                where.link or tag.name == "a",
                _own_colour(tag) or where.colour,
            )

        seen = False
        for string, where in _strings(container, enter, _Where()):
            if seen and (markers.SEPARATOR.match(string) or _opens_header(string)):
                break  # an older quoted mail starts: nothing below is an answer
            seen = True
            if (wrapper and not where.quoted) or _typed_in_colour(where, base):
                found.add(id(string))
    return found


def _typed_in_colour(where: _Where, base: float) -> bool:
    """In a colour of its own, where the quoted mail's is grey; a link is blue anyway."""
    if where.link or where.colour is None or base >= _ANSWER_CHROMA:
        return False
    return chroma_of(where.colour) >= _ANSWER_CHROMA


def _opens_header(string: NavigableString) -> bool:
    """``string`` is the From label of a header block (within a few levels up)."""
    if not markers.FROM_LINE.match(string):
        return False
    for level, ancestor in enumerate(string.parents):
        text = ancestor.get_text("\n")
        if level > 4 or not text.lstrip().startswith(string.strip()[:40]):
            return False
        if markers.is_header_block(text):
            return True
    return False


def _own_colour(element: Tag) -> str | None:
    style = str(element.get("style") or "").lower()
    match = re.search(r"(?:^|;)\s*color\s*:\s*([^;]+)", style)
    if match:
        return match.group(1).replace("!important", "").strip()
    return str(element["color"]) if element.get("color") else None


def _colour_at(element: Tag) -> str | None:
    for level, node in enumerate([element, *element.parents]):
        if level > 50:
            break
        if isinstance(node, Tag) and (colour := _own_colour(node)):
            return colour
    return None


def _answered_after(soup: BeautifulSoup, containers: list[Tag]) -> bool:
    """Words after the first container that are in none and in no signature: the sender
    answered below a quote (Apple Mail, Thunderbird)."""
    if not containers:
        return False
    taken = {id(container) for container in containers}
    first = id(containers[0])
    passed = [False]  # the walk is in document order: set once the first is entered

    def enter(tag: Tag, inside: bool) -> bool:
        passed[0] = passed[0] or id(tag) == first
        return inside or id(tag) in taken or _is_signature(tag)

    return any(passed[0] and not inside for _, inside in _strings(soup, enter, False))


def _is_signature(tag: Tag) -> bool:
    classes = [str(name) for name in tag.get_attribute_list("class") if name]
    return any("signature" in name.lower() for name in classes) or str(
        tag.get("id") or ""
    ).lower().startswith("signature")


def _strings(
    root: Tag, enter: Callable[[Tag, T], T], start: T
) -> Iterator[tuple[NavigableString, T]]:
    """Non-blank strings under ``root`` in document order, each with what ``enter`` made
    of the tags above it (down from ``root``). Iterative: nesting depth costs nothing."""
    stack: list[tuple[PageElement, T]] = [(child, start) for child in reversed(root.contents)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, Tag):
            inner = enter(node, where)
            stack.extend((child, inner) for child in reversed(node.contents))
        elif isinstance(node, NavigableString) and node.strip():
            yield node, where


# -- rendering an inline reply --------------------------------------------------------------


def _mark(containers: list[Tag], answers: set[int]) -> None:
    """Sentinels around each container and each answer, so the rendered lines can be told
    apart; the containers' own blockquotes become plain blocks (one level of ``> ``)."""
    for container in containers:
        for string in container.find_all(string=True):
            if id(string) in answers and isinstance(string, NavigableString):
                string.replace_with(f"{_A_OPEN}{string}{_A_CLOSE}")
        for quote in [container, *container.find_all("blockquote")]:
            quote.name, quote.attrs = "div", {}
        container.insert(0, NavigableString(_Q_OPEN))
        container.append(NavigableString(_Q_CLOSE))


def _quoted_lines(text: str, keep_trailing: bool) -> str:
    """Lines inside a container become ``> `` lines unless they hold an answer; quoted
    lines after the last answer are dropped (``[quoted text removed]``)."""
    lines: list[tuple[str, bool]] = []  # (line, quoted)
    quoting = answering = False
    for line in text.splitlines():
        own = quoted = False
        for piece in re.split(r"([\ufff0-\ufff3])", line):
            if piece in (_Q_OPEN, _Q_CLOSE, _A_OPEN, _A_CLOSE):
                quoting = piece == _Q_OPEN if piece in (_Q_OPEN, _Q_CLOSE) else quoting
                answering = piece == _A_OPEN if piece in (_A_OPEN, _A_CLOSE) else answering
            elif piece.strip():
                own |= answering or not quoting
                quoted |= quoting and not answering
        plain = _SENTINELS.sub("", line).rstrip()
        lines.append((plain, quoted and not own))
    removed = False
    if not keep_trailing:
        while lines and (lines[-1][1] or not lines[-1][0].strip()):
            removed |= lines.pop()[1]
    rendered = "\n".join(f"> {line.strip()}" if quoted else line for line, quoted in lines)
    return _with_removed(_tidy(rendered), removed)


def _tidy(text: str) -> str:
    lines = [line.rstrip() for line in text.replace("\xa0", " ").splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
