"""Naming files that arrive from chat before they land in a conversation's inbox.

A sender chooses the name, so it is hostile until proven otherwise: no directories (no
``../``), no leading dots, a bounded length, and never overwriting a file already there.
Shared by every channel that accepts files.
"""

from __future__ import annotations

import re
from pathlib import Path

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
_MAX_NAME = 100


def safe_filename(name: str) -> str:
    """A basename of ``[A-Za-z0-9._+-]`` that does not start with a dot, at most 100
    characters, keeping the extension when it has to shorten."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    base = _UNSAFE.sub("_", base).strip("._") or "file"
    if len(base) > _MAX_NAME:
        stem, dot, suffix = base.rpartition(".")
        if dot and 0 < len(suffix) <= 10:
            base = f"{stem[: _MAX_NAME - len(suffix) - 1]}.{suffix}"
        else:
            base = base[:_MAX_NAME]
    return base


def unused_path(directory: Path, name: str) -> Path:
    """``name`` in ``directory``, or ``stem-2.ext``, ``stem-3.ext``... if it is taken."""
    candidate = directory / name
    stem, dot, suffix = name.rpartition(".")
    if not dot or not stem:
        stem, suffix = name, ""
    number = 2
    while candidate.exists() or candidate.with_name(candidate.name + ".partial").exists():
        candidate = directory / (f"{stem}-{number}.{suffix}" if suffix else f"{stem}-{number}")
        number += 1
    return candidate


def size_text(size: int) -> str:
    if size >= 1_000_000:
        return f"{size / 1_000_000:.1f} MB"
    if size >= 1_000:
        return f"{size / 1_000:.0f} KB"
    return f"{size} bytes"
