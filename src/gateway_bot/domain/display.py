"""How durations and message texts are shown to people, in one place for every surface:
the operator commands (``cli/status_format.py``: ``status``, ``approvals``), the dashboard
(``dashboard/views.py``) and the core's chat answers (``core/status/answer.py``).

Plain functions of plain values, in the bottom layer so each of those may import them
(import-linter's layers). Two duration styles on purpose: ``age`` is a table column's one
rounded unit (``3m``, ``2h``, ``4d``); ``span`` is a page's two floored units (``3m05s``,
``1h02m``), where a run's length is read closely.
"""

from __future__ import annotations


def age(seconds: float) -> str:
    """One rounded unit: ``45s``, ``3m`` (from 2 minutes), ``5h`` (from 2 hours), ``3d``
    (from 2 days). Negative (a clock step back) reads as 0."""
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


def span(seconds: float) -> str:
    """Two floored units: ``45s``, ``3m05s``, ``1h02m``. Callers pass a non-negative span."""
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m{seconds % 60:02.0f}s"
    return f"{seconds // 3600:.0f}h{seconds % 3600 // 60:02.0f}m"


def one_line(text: str, limit: int) -> str:
    """``text`` with every run of whitespace (newlines too) as one space, cut to ``limit``
    characters, the last of them ``…`` when it was cut."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


_BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
"""The bidi marks, embeddings, overrides and isolates: ``report\\u202etxt.exe`` renders as
``reportexe.txt``, so a file name or a sender reads as another."""


def visible(text: str) -> str:
    """``text`` with every control character (but tab and newline) and every bidi control
    written out as an escape a person can read, ``\\x1b``, ``\\u202e``: what a page or a
    terminal shows is then what the text holds. The escapes contain no HTML special
    character, so the result is as safe to put into markup as its input was."""
    if text.isprintable():  # the common case: nothing to rewrite
        return text
    return "".join(_shown(char) for char in text)


def _shown(char: str) -> str:
    code = ord(char)
    if char in "\t\n" or not (code < 0x20 or 0x7F <= code <= 0x9F or char in _BIDI_CONTROLS):
        return char
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"
