"""Plain-text pieces shared by the operator commands (``status``, ``approvals``): aligned
tables, ages, previews, and the one filter that keeps senders' control characters off the
operator's terminal. Ages and the one-line cut are ``domain/display.py``'s (the dashboard
shares them)."""

from __future__ import annotations

from collections.abc import Sequence

from gateway_bot.domain.display import age, one_line

__all__ = ["PREVIEW_CHARS", "age", "preview", "printable", "table"]

PREVIEW_CHARS = 60


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["", f"{title} ({len(rows)})"]
    if not rows:
        out.append("  none")
        return out
    rows = [[printable(str(cell)) for cell in row] for row in rows]
    widths = [max(len(row[n]) for row in [header, *rows]) for n in range(len(header))]
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        out.append(("  " + "  ".join(cells)).rstrip())
    return out


def printable(text: str) -> str:
    """Senders choose message bodies and names: a terminal must never receive their
    control or format characters (an escape sequence would rewrite the operator's screen)."""
    return "".join(ch if ch == " " or ch.isprintable() else "?" for ch in text)


def preview(text: str) -> str:
    return one_line(text, PREVIEW_CHARS)
