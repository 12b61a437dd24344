"""CSS values that hide what they apply to, for ``visibility.py``: each predicate answers
"would a mail client show this?" for one family of tricks, leaning towards "hidden" where a
client would hide it (a hidden word removed costs a sentence; a hidden word kept is an
instruction the reader never saw).

Apart from ``visibility.py`` (the walk and the cascade) because each trick found in the
wild adds a case here: percentages and ``filter: opacity()`` as well as ``opacity: 0``;
``overflow: clip`` as well as ``hidden``; ``max-width`` as well as ``height``; an
``inset()`` clip whose sides meet; a transform scaling to nothing or translating off the
page; a font size relative to a parent's zero size (``1.5em`` of ``0`` is ``0``); the font
shorthand (``font: 0/0 a``); text painted by ``-webkit-text-fill-color`` rather than
``color``; colours in CSS Color 4 syntax (``rgb(255 255 255)``, ``hsl(0 0% 100%)``).
"""

from __future__ import annotations

import re

import tinycss2.color3
import tinycss2.color4

Style = dict[str, str]

OFFSCREEN = -200.0
"""px: an element pushed further left or up than this is off the page."""
DEFAULT_FONT_PX = 16.0
_TINY = 0.1
"""An opacity, zoom or scale under this shows nothing readable."""

_LENGTH = re.compile(r"^(-?[0-9]*\.?[0-9]+)(px|pt|em|rem|%|cm|mm|in|pc|ex|ch|vw|vh|q)?$")
_ABSOLUTE = {"px": 1.0, "pt": 4 / 3, "pc": 16.0, "cm": 37.8, "mm": 3.78, "q": 0.945, "in": 96.0}
_NAMED_SIZES = {
    "xx-small": 9.0, "x-small": 10.0, "small": 13.0, "medium": 16.0, "large": 18.0,
    "x-large": 24.0, "xx-large": 32.0, "xxx-large": 48.0,
}  # fmt: skip


def plain(value: str | None) -> str:
    """A value without ``!important``, ``calc()`` around a single term, or spaces at its
    ends (``calc(0px)`` is ``0px`` to a browser)."""
    text = (value or "").replace("!important", "").strip()
    while (inner := re.fullmatch(r"calc\((.*)\)", text)) is not None:
        text = inner.group(1).strip()
    return text


def length(value: str | None, font_px: float = DEFAULT_FONT_PX) -> float | None:
    """``value`` in px (em and % against ``font_px``, viewport units as px), or None."""
    match = _LENGTH.match(plain(value))
    if match is None:
        return None
    number, unit = float(match.group(1)), match.group(2) or "px"
    if unit in ("em", "ex", "ch"):
        return number * font_px
    if unit == "%":
        return number * font_px / 100
    if unit == "rem":
        return number * DEFAULT_FONT_PX
    return number * _ABSOLUTE.get(unit, 1.0)


def is_zero(value: str | None) -> bool:
    """A length of one pixel or less (a font that size is unreadable, a box that size
    shows nothing)."""
    found = length(value)
    return found is not None and found <= 1.0


def number(value: str | None) -> float | None:
    """A plain number or a percentage, as a number (``50%`` is 0.5)."""
    text = plain(value)
    try:
        return float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        return None


def font_px(style: Style, parent_px: float) -> float:
    """The element's computed font size in px: a relative size is of its parent's (the
    em child of a ``font-size:0`` parent is as invisible as its parent)."""
    value = style.get("font-size") or _shorthand_size(style.get("font"))
    if value is None:
        return parent_px
    text = plain(value)
    if text in _NAMED_SIZES:
        return _NAMED_SIZES[text]
    if text == "smaller":
        return parent_px / 1.2
    if text == "larger":
        return parent_px * 1.2
    found = length(text, parent_px)
    return parent_px if found is None else max(found, 0.0)


def _shorthand_size(font: str | None) -> str | None:
    """The size in a ``font`` shorthand (``bold 0/0 serif``): the word before a ``/``, or
    the first length with a unit (a bare number there is a weight)."""
    for word in plain(font).split():
        size = word.split("/", 1)[0]
        if "/" in word or (length(size) is not None and not re.fullmatch(r"[0-9.]+", size)):
            return size
    return None


def transparent_box(style: Style) -> bool:
    """``opacity``, ``filter: opacity()`` or ``zoom`` near zero."""
    opacity = number(style.get("opacity"))
    if opacity is not None and opacity < _TINY:
        return True
    zoom = number(style.get("zoom"))
    if zoom is not None and 0 < zoom < _TINY:
        return True
    for found in re.finditer(r"opacity\(([^)]*)\)", style.get("filter", "")):
        level = number(found.group(1))
        if level is not None and level < _TINY:
            return True
    return False


def clipped(style: Style) -> bool:
    """A clip or clip-path that leaves nothing, or a transform that shrinks the element to
    nothing or moves it off the page."""
    clip = re.sub(r"[\s,]|px", "", style.get("clip", ""))
    if clip in ("rect(0000)", "rect(1111)"):
        return True
    clip_path = plain(style.get("clip-path")).replace(" ,", ",")
    if clip_path.startswith(("circle(0", "ellipse(0")) or _inset_meets(clip_path):
        return True
    transform = style.get("transform", "")
    scales = [style.get("scale", ""), *re.findall(r"scale[xyz3d]*\(([^)]*)\)", transform)]
    for scale in scales:
        for factor in re.split(r"[\s,]+", scale.strip()):
            amount = number(factor)
            if amount is not None and abs(amount) < _TINY:
                return True
    for moved in re.findall(r"translate[xy3d]*\(([^)]*)\)", style.get("transform", "")):
        if any((length(v) or 0) < OFFSCREEN for v in re.split(r"[\s,]+", moved.strip())):
            return True
    return False


def _inset_meets(clip_path: str) -> bool:
    """``inset(top right bottom left)`` whose opposite sides meet (50% each, 100% one)."""
    found = re.match(r"inset\(([^)]*)\)", clip_path)
    if found is None:
        return False
    words = found.group(1).split(" round ")[0].split()
    sides = [s for s in (_percent(word) for word in words) if s is not None]
    if len(sides) != len(words) or not 1 <= len(sides) <= 4:
        return False
    top = sides[0]
    right = sides[1] if len(sides) > 1 else top
    bottom = sides[2] if len(sides) > 2 else top
    left = sides[3] if len(sides) > 3 else right
    return top + bottom >= 100 or left + right >= 100


def _percent(word: str) -> float | None:
    if word.endswith("%"):
        try:
            return float(word[:-1])
        except ValueError:
            return None
    return 0.0 if length(word) is not None else None


def zero_box(style: Style) -> bool:
    """A box of no height or width whose overflow is not drawn."""
    overflow = style.get("overflow", "") + style.get("overflow-y", "") + style.get("overflow-x", "")
    keys = ("max-height", "height", "width", "max-width")
    cut = "hidden" in overflow or "clip" in overflow
    return cut and any(is_zero(style.get(key)) for key in keys)


def offscreen(style: Style) -> bool:
    for key in ("left", "top", "right", "text-indent", "margin-left", "margin-top"):
        value = length(style.get(key))
        if value is not None and value < OFFSCREEN:
            if key in ("text-indent", "margin-left", "margin-top"):
                return True
            if style.get("position", "") in ("absolute", "fixed", "relative"):
                return True
    return False


def rgb(color: str | None) -> tuple[float, float, float, float] | None:
    """A CSS colour (levels 3 and 4) as sRGB red, green, blue, alpha (0-1); None for one
    that cannot be judged (``currentcolor``, ``var()``, a space without an sRGB form)."""
    if not color:
        return None
    parsed3 = tinycss2.color3.parse_color(color)
    if parsed3 is not None and parsed3 != "currentcolor":
        return (parsed3.red, parsed3.green, parsed3.blue, parsed3.alpha)
    parsed4 = tinycss2.color4.parse_color(color)
    if parsed4 is None or parsed4 == "currentcolor":
        return None
    try:
        red, green, blue = parsed4.to("srgb").coordinates
    except (NotImplementedError, ValueError):
        return (0.0, 0.0, 0.0, parsed4.alpha) if parsed4.alpha < _TINY else None
    return (_clamp(red), _clamp(green), _clamp(blue), float(parsed4.alpha))


def _clamp(value: float) -> float:
    return min(1.0, max(0.0, float(value)))
