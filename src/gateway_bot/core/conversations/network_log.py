"""A conversation's network log (``network.log`` beside ``events.jsonl``): every request its
sandbox's egress proxy allowed or blocked, one JSON object a line
(``{"time", "method", "url", "allowed", "reason"?, "held"?}``, ``images/proxy/egress_addon.py``;
a request an ask rule held has a ``held`` line, then an allowed or a refused one).

The lines are written by the proxy about requests the agent chose: hostile input. The file
is the sandbox's and read through it (``ContextFiles.network_log_tail``; on this machine
``sandbox/host_files.py`` opens the conversation directory no-follow, and ``network.log``
there is either a plain file or the one link the sandbox itself made to the proxy's log,
whose target is opened no-follow too, so a link the proxy put in its logs directory is
refused). Only the last ``MAX_LOG_BYTES`` are read, the newest
``MAX_ENTRIES`` lines kept, every field cut to a length; a line that is not the expected
JSON is shown as it is (cut), never interpreted. The dashboard escapes what it shows.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass

from gateway_bot.sandbox.context_files import ContextFiles, FileRefused

MAX_LOG_BYTES = 512 * 1024
MAX_ENTRIES = 300
"""The page shows the newest this many requests."""
MAX_FIELD_CHARS = 500


@dataclass(frozen=True)
class NetworkRequest:
    time: str
    method: str
    url: str
    allowed: bool | None
    """None when the line could not be read as a request (then ``url`` holds the line)."""
    reason: str
    held: bool = False
    """The proxy held it for approval (a later line says how it was decided)."""
    at: float | None = None
    """``time`` read as an ISO 8601 instant (epoch seconds), so a page shows it in the format
    of its other times; None when the proxy's text is not one (then ``time`` is shown)."""


@dataclass(frozen=True)
class NetworkLog:
    requests: tuple[NetworkRequest, ...]
    """Newest last."""
    note: str = ""
    """What is missing and why: no log yet, cut to its tail, not readable."""


async def read_network_log(files: ContextFiles) -> NetworkLog:
    """The context's network log, read by its sandbox. Never raises for a missing or
    refused file: the note says why there is nothing."""
    try:
        tail = await files.network_log_tail(MAX_LOG_BYTES)
    except FileRefused as exc:
        return NetworkLog((), str(exc))
    except OSError as exc:
        return NetworkLog((), f"The network log is not readable: {exc.strerror or exc}.")
    if tail is None:
        return NetworkLog((), "No network log yet (no request made, or no egress proxy).")
    return parse_network_log(tail.data, cut=tail.cut)


def parse_network_log(data: bytes, *, cut: bool = False) -> NetworkLog:
    """The newest ``MAX_ENTRIES`` requests of a log's bytes (``cut``: the bytes start
    mid-file, so the first line may be partial and is dropped)."""
    lines = data.decode("utf-8", errors="replace").splitlines()
    if cut and lines:
        lines = lines[1:]
    lines = [line for line in lines if line.strip()]
    dropped = max(0, len(lines) - MAX_ENTRIES)
    requests = tuple(_request(line) for line in lines[dropped:])
    note = ""
    if cut or dropped:
        note = f"Only the newest {len(requests)} requests are shown."
    return NetworkLog(requests, note)


def _request(line: str) -> NetworkRequest:
    try:
        entry = json.loads(line)
    except ValueError:
        entry = None
    if not isinstance(entry, dict) or not isinstance(entry.get("allowed"), bool):
        return NetworkRequest("", "", _cut(line), None, "not a request line")
    return NetworkRequest(
        time=_cut(_text(entry.get("time")), 40),
        method=_cut(_text(entry.get("method")), 20),
        url=_cut(_text(entry.get("url"))),
        allowed=entry["allowed"],
        reason=_cut(_text(entry.get("reason"))),
        held=entry.get("held") is True,
        at=_instant(entry.get("time")),
    )


def _instant(value: object) -> float | None:
    """The proxy writes UTC with milliseconds; anything else (it is the less trusted side)
    is no instant."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.timestamp()


def _text(value: object) -> str:
    return value if isinstance(value, str) else "" if value is None else json.dumps(value)


def _cut(text: str, limit: int = MAX_FIELD_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
