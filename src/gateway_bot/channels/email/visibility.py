"""Only what a person sees in their mail client reaches the agent.

A mail can carry words its reader never sees: HTML hidden by CSS (``display:none``,
``visibility:hidden``, a zero font size, text the colour of its background, off-screen
positioning, a zero-sized clipped box, ``opacity:0``, Outlook's ``mso-hide:all``,
``<template>``, the ``hidden`` attribute) and invisible Unicode (tag characters
U+E0000-E007F, zero-width characters, bidi controls, variation selectors past the first).
Someone forwards such a mail and asks "what do you make of this?": the hidden part is an
instruction to the agent the person never read. This module removes both.

CSS comes from ``style`` attributes, ``<font color>``/``bgcolor`` attributes and the
mail's ``<style>`` rules (parsed by tinycss2, matched by soupsieve through BeautifulSoup,
``@media`` blocks included: what any client hides is hidden). It is not a browser: the
cascade is "rules in order, then the inline style", and whatever a major client would hide
is treated as hidden, so an attack needs a trick no client renders invisibly.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

import tinycss2
import tinycss2.color3
from bs4 import BeautifulSoup, Tag
from bs4.element import NavigableString, PreformattedString

Style = dict[str, str]

_NEVER_SHOWN = ("script", "style", "head", "title", "template", "noscript", "xml", "object")
_OFFSCREEN = -200.0
"""px: an element pushed further left or up than this is off the page."""
_MIN_CONTRAST = 1.3
"""WCAG contrast ratio under which text is read as the colour of its background (1.0 is
identical; #f8f8f8 on white is 1.06, light grey #cccccc on white 1.6 and stays)."""
_WHITE = (1.0, 1.0, 1.0)
_BLACK = (0.0, 0.0, 0.0)


def strip_hidden(soup: BeautifulSoup) -> bool:
    """Remove from ``soup`` every element and string a reader would not see; True when
    some of what was removed had words in it (the agent is told). One walk from the top,
    each element's inherited colours and sizes handed down (no walk up per string: a mail
    of thousands of nested elements stays linear)."""
    styles = _StyleSheet(soup)
    removed_words = False
    stack: list[tuple[Tag, _Inherited]] = [(soup, _Inherited())]
    while stack:
        node, inherited = stack.pop()
        for child in list(node.children):
            if isinstance(child, PreformattedString):  # comments, CDATA, doctype
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
                    stack.append((child, inherited.under(style)))
    return removed_words


@dataclass(frozen=True)
class _Inherited:
    """The inherited properties that decide whether text is seen."""

    color: str | None = None
    background: str | None = None
    font_size: str | None = None
    visibility: str | None = None

    def under(self, style: Style) -> _Inherited:
        return _Inherited(
            style.get("color", self.color),
            _background(style) or self.background,
            style.get("font-size", self.font_size),
            style.get("visibility", self.visibility),
        )

    def hides_text(self) -> bool:
        if self.visibility is not None and self.visibility.startswith(("hidden", "collapse")):
            return True
        if self.font_size is not None and _is_zero(self.font_size):
            return True
        return self.color is not None and _same_colour(self.color, self.background)


# -- CSS ----------------------------------------------------------------------------------


class _StyleSheet:
    """Each element's declared style: the ``<style>`` rules matching it, in order, then its
    own attributes and inline style. Read once per element."""

    def __init__(self, soup: BeautifulSoup) -> None:
        self._by_element: dict[int, Style] = {}
        for sheet in soup.find_all("style"):
            for selector, declarations in _rules(sheet.get_text()):
                try:
                    matched = soup.select(selector)
                except Exception:  # a selector soupsieve cannot match (:hover, ::before)
                    continue
                for element in matched:
                    self._by_element.setdefault(id(element), {}).update(declarations)
        self._cache: dict[int, Style] = {}

    def of(self, element: Tag) -> Style:
        key = id(element)
        if key in self._cache:
            return self._cache[key]
        style = dict(self._by_element.get(key, {}))
        if element.get("color"):
            style.setdefault("color", str(element["color"]))
        if element.get("bgcolor"):
            style.setdefault("background-color", str(element["bgcolor"]))
        style.update(_declarations(str(element.get("style") or "")))
        self._cache[key] = style
        return style


def _rules(css: str) -> Iterator[tuple[str, Style]]:
    """(selector, declarations) of a style sheet, ``@media`` and ``@supports`` opened."""
    for rule in tinycss2.parse_stylesheet(css, skip_comments=True, skip_whitespace=True):
        if rule.type == "qualified-rule":
            selector = tinycss2.serialize(rule.prelude).strip()
            yield selector, _declarations(tinycss2.serialize(rule.content))
        elif _opens_rules(rule):
            yield from _rules(tinycss2.serialize(rule.content))


def _opens_rules(rule: object) -> bool:
    """An ``@media`` or ``@supports`` block: its rules apply in some client."""
    keyword = getattr(rule, "lower_at_keyword", None)
    return keyword in ("media", "supports") and getattr(rule, "content", None) is not None


def _declarations(text: str) -> Style:
    found: Style = {}
    for item in tinycss2.parse_blocks_contents(text, skip_comments=True, skip_whitespace=True):
        if item.type == "declaration":
            found[item.lower_name] = tinycss2.serialize(item.value).strip().lower()
    return found


def _hidden_box(element: Tag, style: Style) -> bool:
    """The element and everything in it are not shown, whatever its children say."""
    if element.name in _NEVER_SHOWN or element.has_attr("hidden"):
        return True
    if style.get("display", "").startswith("none") or "all" in style.get("mso-hide", ""):
        return True
    if _number(style.get("opacity")) is not None and (_number(style["opacity"]) or 0) < 0.1:
        return True
    if _clipped(style) or _offscreen(style):
        return True
    overflow = style.get("overflow", "") + style.get("overflow-y", "")
    zero_box = any(_is_zero(style.get(key)) for key in ("max-height", "height", "width"))
    return "hidden" in overflow and zero_box


def _clipped(style: Style) -> bool:
    clip = re.sub(r"[\s,]|px", "", style.get("clip", ""))
    clip_path = style.get("clip-path", "").replace(" ", "")
    return (
        clip in ("rect(0000)", "rect(1111)")
        or clip_path.startswith(("inset(50%", "inset(100%", "circle(0"))
        or "scale(0)" in style.get("transform", "").replace(" ", "")
    )


def _offscreen(style: Style) -> bool:
    for key in ("left", "top", "right", "text-indent", "margin-left", "margin-top"):
        value = _length(style.get(key))
        if value is not None and value < _OFFSCREEN:
            if key in ("text-indent", "margin-left", "margin-top"):
                return True
            if style.get("position", "") in ("absolute", "fixed", "relative"):
                return True
    return False


def _background(style: Style) -> str | None:
    """The element's background colour; ``image`` for a picture, against which no text
    colour can be judged."""
    if "background-image" in style or "url(" in style.get("background", ""):
        return "image"
    if "background-color" in style:
        return style["background-color"]
    for token in style.get("background", "").split():
        if tinycss2.color3.parse_color(token) is not None:
            return token
    return None


def _same_colour(color: str, background: str | None) -> bool:
    text = tinycss2.color3.parse_color(color)
    if text is None or text == "currentcolor":
        return False
    if text.alpha < 0.1:
        return True
    if background == "image":
        return False
    back = tinycss2.color3.parse_color(background) if background else None
    if back is None or back == "currentcolor" or back.alpha < 0.1:
        base = _WHITE
    else:
        base = (back.red, back.green, back.blue)
    return _contrast((text.red, text.green, text.blue), base) < _MIN_CONTRAST


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
    parsed = tinycss2.color3.parse_color(color) if color else None
    if parsed is None or parsed == "currentcolor" or parsed.alpha < 0.5:
        return 0.0
    channels = (float(parsed.red), float(parsed.green), float(parsed.blue))
    return max(channels) - min(channels)


_LENGTH = re.compile(r"^(-?[0-9]*\.?[0-9]+)(px|pt|em|rem|%|cm|mm|in|pc|ex|ch|vw|vh)?")


def _length(value: str | None) -> float | None:
    match = _LENGTH.match((value or "").replace("!important", "").strip())
    if match is None:
        return None
    number, unit = float(match.group(1)), match.group(2) or "px"
    scale = {"pt": 4 / 3, "em": 16, "rem": 16, "%": 0.16, "cm": 37.8, "mm": 3.78, "in": 96}
    return number * scale.get(unit, 1.0)


def _is_zero(value: str | None) -> bool:
    """A length of one pixel or less (a font that size is unreadable, a box that size
    shows nothing)."""
    length = _length(value)
    return length is not None and length <= 1.0


def _number(value: str | None) -> float | None:
    try:
        return float((value or "").replace("!important", "").strip())
    except ValueError:
        return None


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
