"""Where an agent CLI comes from and where its model API is: the pieces every backend
descriptor (``agents/<backend>/backend.py``) shares."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

SETUP_TOOLS_BIN = Path(__file__).resolve().parents[3] / ".tools" / "node_modules" / ".bin"
"""Where scripts/setup.sh installs the pinned agent CLIs: the checkout this package runs
from (uv installs the project editable, so this file lives in its src/)."""


def pinned_or_on_path(command: Sequence[str], program: str) -> list[str]:
    """The command with ``program`` found: one that is not on PATH is the one set-up pinned
    in the checkout's .tools/, so the default works in a shell whose PATH lacks it (the
    ``gateway-bot`` launcher's). PATH wins: an operator's own install is never
    second-guessed; paths and other names are left as they are."""
    if command[0] != program or shutil.which(program) is not None:
        return list(command)
    pinned = SETUP_TOOLS_BIN / program
    if os.access(pinned, os.X_OK):
        return [str(pinned), *command[1:]]
    return list(command)


def api_origin(url: str) -> tuple[str, str | None, int]:
    """``(scheme, host, port)`` of a model API URL, the port defaulted by scheme. A port
    out of range falls back to the default: the agent then fails to connect and says so."""
    base = urlsplit(url)
    scheme = (base.scheme or "https").lower()
    try:
        port = base.port or (443 if scheme == "https" else 80)
    except ValueError:
        port = 443 if scheme == "https" else 80
    return scheme, base.hostname, port
