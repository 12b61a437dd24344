"""Plain-text pieces shared by the operator commands (``status``, ``approvals``): aligned
tables, ages, previews, and the one filter that keeps senders' control characters off the
operator's terminal."""

from __future__ import annotations

from collections.abc import Sequence

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


def age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


def preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"
