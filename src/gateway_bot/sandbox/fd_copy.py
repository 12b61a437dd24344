"""Copying what an agent wrote, bounded: from an open descriptor (opened no-follow by the
caller) to one the daemon owns, at most ``size`` bytes whatever the file grows to meanwhile
(the agent may still be writing it, or it may be sparse and claim a terabyte)."""

from __future__ import annotations

import os
from collections.abc import Callable

_CHUNK = 1024 * 1024


def copy_at_most(
    source: int, out: int, size: int, between_chunks: Callable[[], None] | None = None
) -> None:
    """Copy up to ``size`` bytes from ``source`` to ``out``; ``between_chunks`` runs before
    each chunk (raising there stops the copy: a caller that gave up)."""
    remaining = size
    while remaining > 0:
        if between_chunks is not None:
            between_chunks()
        chunk = os.read(source, min(remaining, _CHUNK))
        if not chunk:
            return
        remaining -= len(chunk)
        view = memoryview(chunk)
        while view:
            view = view[os.write(out, view) :]
