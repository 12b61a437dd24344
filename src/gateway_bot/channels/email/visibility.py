"""Only what a person sees in their mail client reaches the agent.

A mail can carry words its reader never sees: HTML hidden by CSS (``display:none``,
``visibility:hidden``, a zero font size, text the colour of its background, off-screen
positioning, a zero-sized clipped box, ``opacity:0``, Outlook's ``mso-hide:all``,
``<template>``, the ``hidden`` attribute, fallback content such as ``<canvas>``'s, a closed
``<details>`` or ``<dialog>``; the value tricks are ``css_hiding.py``'s) and invisible
Unicode (tag characters U+E0000-E007F, zero-width characters, bidi controls, variation
selectors past the first).
Someone forwards such a mail and asks "what do you make of this?": the hidden part is an
instruction to the agent the person never read. This module removes both.

CSS comes from ``style`` attributes, ``<font color>``/``bgcolor`` attributes and the
mail's ``<style>`` rules (parsed by tinycss2, matched by soupsieve through BeautifulSoup,
``@media``, ``@layer``, ``@container`` blocks and nested rules included: what any client
hides is hidden). It is not a browser: the cascade is "rules in order, then the inline
style, then the ``!important`` ones in that order", and whatever a major client would hide
is treated as hidden, so an attack needs a trick no client renders invisibly.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

import tinycss2
from bs4 import BeautifulSoup, Tag
from bs4.element import NavigableString, PreformattedString

from gateway_bot.channels.email import css_hiding
from gateway_bot.channels.email.css_hiding import Style

_NEVER_SHOWN = (
    "script", "style", "head", "title", "template", "noscript", "xml", "object",
    "datalist", "noembed", "noframes", "iframe", "canvas", "video", "audio", "rp", "select",
)  # fmt: skip
"""Elements whose words a client never draws: fallback content a client that renders the
element does not show (``<canvas>``, ``<video>``, ``<iframe>``, ``<noembed>``), options
that are never listed (``<datalist>``) or only on a click (``<select>``)."""
_OPENED_BY_ATTRIBUTE = ("dialog",)
"""Shown only with the ``open`` attribute (a closed ``<details>`` shows its summary)."""
_OPENS_RULES = ("media", "supports", "layer", "container", "scope", "document", "-moz-document")
"""At-rules whose rules apply in some client."""
_MIN_CONTRAST = 1.3
"""WCAG contrast ratio under which text is read as the colour of its background (1.0 is
identical; #f8f8f8 on white is 1.06, light grey #cccccc on white 1.6 and stays)."""
_WHITE = (1.0, 1.0, 1.0)


def strip_hidden(soup: BeautifulSoup) -> bool:
    """Remove from ``soup`` every element and string a reader would not see; True when
    some of what was removed had words in it (the agent is told). One walk from the top,
    each element's inherited colours and sizes handed down (no walk up per string: a mail
    of thousands of nested elements stays linear). Tooltips (``title``) go too: the reader
    sees one only by hovering over it."""
    styles = _StyleSheet(soup)
    removed_words = False
    stack: list[tuple[Tag, _Inherited]] = [(soup, _Inherited())]
    while stack:
        node, inherited = stack.pop()
        closed = node.name == "details" and not node.has_attr("open")
        summary = node.find("summary", recursive=False) if closed else None
        for child in list(node.children):
            if isinstance(child, PreformattedString):  # comments, CDATA, doctype
                child.extract()
            elif closed and child is not summary:
                removed_words |= bool(child.get_text(strip=True))
                child.extract()
            elif isinstance(child, NavigableString):
                if child.strip() and inherited.hides_text():
                    removed_words = True
                    child.replace_with("")
            elif isinstance(child, Tag):
                style = styles.of(child)
                if _hidden_box(child, style):
                    removed_words |= bool(child.get_text(strip=True))
                    child.decompose()
                else:
                    child.attrs.pop("title", None)
                    stack.append((child, inherited.under(style)))
    return removed_words


@dataclass(frozen=True)
class _Inherited:
    """The inherited properties that decide whether text is seen."""

    color: str | None = None
    fill: str | None = None
    """``-webkit-text-fill-color``: when set, what the text is painted in (not ``color``)."""
    background: str | None = None
    font_px: float = css_hiding.DEFAULT_FONT_PX
    visibility: str | None = None

    def under(self, style: Style) -> _Inherited:
        return _Inherited(
            style.get("color", self.color),
            style.get("-webkit-text-fill-color", self.fill),
            _background(style) or self.background,
            css_hiding.font_px(style, self.font_px),
            style.get("visibility", self.visibility),
        )

    def hides_text(self) -> bool:
        if self.visibility is not None and self.visibility.startswith(("hidden", "collapse")):
            return True
        if self.font_px <= 1.0:
            return True
        painted = self.fill if self.fill and self.fill != "currentcolor" else self.color
        return painted is not None and _same_colour(painted, self.background)


# -- CSS ----------------------------------------------------------------------------------


class _StyleSheet:
    """Each element's declared style, in the cascade's order of precedence: the
    ``<style>`` rules matching it, in order; its presentational attributes and inline
    style; then the rules' ``!important`` declarations, then the inline ones (an important
    ``display:none`` in a sheet beats an inline ``display:block``). Read once per element."""

    def __init__(self, soup: BeautifulSoup) -> None:
        self._normal: dict[int, Style] = {}
        self._important: dict[int, Style] = {}
        for sheet in soup.find_all("style"):
            for selector, normal, important in _rules(sheet.get_text()):
                try:
                    matched = soup.select(selector)
                except Exception:  # a selector soupsieve cannot match (:hover, ::before)
                    continue
                for element in matched:
                    self._normal.setdefault(id(element), {}).update(normal)
                    self._important.setdefault(id(element), {}).update(important)
        self._cache: dict[int, Style] = {}

    def of(self, element: Tag) -> Style:
        key = id(element)
        if key in self._cache:
            return self._cache[key]
        style = dict(self._normal.get(key, {}))
        if element.get("color"):
            style.setdefault("color", str(element["color"]))
        if element.get("bgcolor"):
            style.setdefault("background-color", str(element["bgcolor"]))
        inline, inline_important = _declarations(str(element.get("style") or ""))
        style.update(inline)
        style.update(self._important.get(key, {}))
        style.update(inline_important)
        self._cache[key] = style
        return style


def _rules(css: str, parent: str | None = None) -> Iterator[tuple[str, Style, Style]]:
    """(selector, declarations, important declarations) of a style sheet: ``@media``,
    ``@supports``, ``@layer``, ``@container``... opened, nested rules (``.a { .b {} }``,
    ``& .b``) given their full selector."""
    for rule in tinycss2.parse_stylesheet(css, skip_comments=True, skip_whitespace=True):
        yield from _rule(rule, parent)


def _rule(rule: object, parent: str | None) -> Iterator[tuple[str, Style, Style]]:
    kind = getattr(rule, "type", None)
    content = getattr(rule, "content", None)
    if kind == "qualified-rule" and content is not None:
        own = tinycss2.serialize(rule.prelude).strip()  # type: ignore[attr-defined]
        selector = own if parent is None else _nested(own, parent)
        normal, important = _declarations(tinycss2.serialize(content))
        yield selector, normal, important
        for inner in tinycss2.parse_blocks_contents(content, skip_comments=True):
            if inner.type in ("qualified-rule", "at-rule"):
                yield from _rule(inner, selector)
    elif getattr(rule, "lower_at_keyword", None) in _OPENS_RULES and content is not None:
        yield from _rules(tinycss2.serialize(content), parent)


def _nested(own: str, parent: str) -> str:
    """A nested rule's selector in full: ``&`` is the parent, else a descendant of it."""
    parts = [part.strip() for part in own.split(",")]
    within = f":is({parent})"
    return ", ".join(
        part.replace("&", within) if "&" in part else f"{within} {part}" for part in parts
    )


def _declarations(text: str) -> tuple[Style, Style]:
    """The declarations of a block, the ``!important`` ones apart."""
    normal: Style = {}
    important: Style = {}
    for item in tinycss2.parse_blocks_contents(text, skip_comments=True, skip_whitespace=True):
        if item.type == "declaration":
            value = tinycss2.serialize(item.value).strip().lower()
            (important if item.important else normal)[item.lower_name] = value
    return normal, important


def _hidden_box(element: Tag, style: Style) -> bool:
    """The element and everything in it are not shown, whatever its children say."""
    if element.name in _NEVER_SHOWN or element.has_attr("hidden"):
        return True
    if element.name in _OPENED_BY_ATTRIBUTE and not element.has_attr("open"):
        return True
    if element.name == "svg" and any(
        css_hiding.is_zero(str(element.get(key) or "1")) for key in ("width", "height")
    ):
        return True
    if style.get("display", "").startswith("none") or "all" in style.get("mso-hide", ""):
        return True
    return (
        css_hiding.transparent_box(style)
        or css_hiding.clipped(style)
        or css_hiding.offscreen(style)
        or css_hiding.zero_box(style)
    )


def _background(style: Style) -> str | None:
    """The element's background colour; ``image`` for a picture, against which no text
    colour can be judged."""
    if "background-image" in style or "url(" in style.get("background", ""):
        return "image"
    if "background-color" in style:
        return style["background-color"]
    for token in style.get("background", "").split():
        if css_hiding.rgb(token) is not None:
            return token
    return None


def _same_colour(color: str, background: str | None) -> bool:
    text = css_hiding.rgb(color)
    if text is None:
        return False
    if text[3] < 0.1:
        return True
    if background == "image":
        return False
    back = css_hiding.rgb(background)
    base = _WHITE if back is None or back[3] < 0.1 else back[:3]
    return _contrast(text[:3], base) < _MIN_CONTRAST


def _contrast(one: tuple[float, float, float], other: tuple[float, float, float]) -> float:
    lighter, darker = sorted((_luminance(one), _luminance(other)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


def _luminance(rgb: tuple[float, float, float]) -> float:
    def channel(value: float) -> float:
        return value / 12.92 if value <= 0.03928 else ((value + 0.055) / 1.055) ** 2.4

    red, green, blue = (channel(v) for v in rgb)
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


def chroma_of(color: str | None) -> float:
    """How coloured (not grey) a CSS colour is, 0 to 1: inline answers are typed in one."""
    parsed = css_hiding.rgb(color)
    if parsed is None or parsed[3] < 0.5:
        return 0.0
    return max(parsed[:3]) - min(parsed[:3])


# -- invisible Unicode --------------------------------------------------------------------

_ZERO_WIDTH = "\u200b\u200c\u200d\u2060\ufeff\u180e\u00ad\u034f\u061c\u115f\u1160\u3164\uffa0"
_BIDI = "\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_SMUGGLING_RUN = 8
"""Zero-width characters in one mail from which a hidden message could be spelled (one bit
each); fewer are what clients put in by themselves (Outlook's &#8203;, a BOM)."""


def strip_invisible(text: str) -> tuple[str, bool]:
    """``text`` without invisible characters, and whether they could have carried words
    (tag characters, bidi controls, variation-selector runs, or many zero-width ones).
    A zero-width joiner between two pictographs (a family emoji) and a single variation
    selector after a character (text or emoji presentation) are what the reader sees, and
    stay."""
    kept: list[str] = []
    suspicious = False
    zero_width = 0
    previous = ""
    for index, char in enumerate(text):
        code = ord(char)
        if 0xE0000 <= code <= 0xE007F or 0xE0100 <= code <= 0xE01EF or char in _BIDI:
            suspicious = True
            continue
        if 0xFE00 <= code <= 0xFE0F:
            if previous and not 0xFE00 <= ord(previous) <= 0xFE0F:
                kept.append(char)
            else:
                suspicious = True
            previous = char
            continue
        if char == "\u200d" and _joins_pictographs(text, index):
            kept.append(char)
            previous = char
            continue
        if char in _ZERO_WIDTH or (unicodedata.category(char) == "Cf" and char != "\u200d"):
            zero_width += 1
            continue
        if char == "\u200d":
            zero_width += 1
            continue
        if unicodedata.category(char) == "Cc" and char not in "\n\t\r":
            continue
        kept.append(char)
        previous = char
    return "".join(kept), suspicious or zero_width >= _SMUGGLING_RUN


def _joins_pictographs(text: str, index: int) -> bool:
    before = text[index - 1] if index else ""
    if before and 0xFE00 <= ord(before) <= 0xFE0F and index > 1:
        before = text[index - 2]
    after = text[index + 1] if index + 1 < len(text) else ""
    return _pictograph(before) and _pictograph(after)


def _pictograph(char: str) -> bool:
    return bool(char) and (ord(char) >= 0x1F000 or 0x2600 <= ord(char) <= 0x27BF)
