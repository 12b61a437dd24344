"""What every backend's stream parser (``agents/<backend>/stream.py``) does alike: read a
line as one JSON object, and say a tool call or its result in one line a person reads.

Pure functions, as the parsers are: they are tested on recorded lines, without a CLI.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway_bot.domain.display import one_line as _flattened

SUMMARY_LIMIT = 120


def json_object(line: str) -> dict[str, Any] | None:
    """The line's JSON object; None for anything else (a CLI's stray output)."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def one_line(text: str) -> str:
    return _flattened(text, SUMMARY_LIMIT)


def path_tail(path: str) -> str:
    """Long paths keep their end: the file name is what a reader needs."""
    return path if len(path) <= SUMMARY_LIMIT else "…" + path[-(SUMMARY_LIMIT - 1) :]


def summarize_tool_call(tool: str, arguments: Any, what_it_does: Mapping[str, str]) -> str:
    """``tool: <the argument that says what the call does>``. ``what_it_does`` names that
    argument per tool ("" for a tool whose name says it all); for another tool, its first
    text argument. A path keeps its end, anything else its start."""
    if not isinstance(arguments, dict):
        return tool
    key = what_it_does.get(tool)
    if key == "":
        return tool
    value = arguments.get(key) if key else None
    if value is None:
        value = next((v for v in arguments.values() if isinstance(v, str)), "")
    if not value:
        return tool
    text = path_tail(str(value)) if key and key.endswith("path") else one_line(str(value))
    return f"{tool}: {text}"
