"""Gemini CLI's ``--output-format stream-json`` lines -> typed agent events.

Pure functions over data, tested on recorded lines. Gemini CLI 0.61 writes one JSON object a
line, each with ``type`` and ``timestamp``: ``init`` (``session_id``, ``model``),
``message`` (``role`` user/assistant, ``content``; assistant text comes in ``delta``
chunks), ``tool_use`` (``tool_name``, ``tool_id``, ``parameters``), ``tool_result``
(``tool_id``, ``status``, ``output`` or ``error``), ``error`` (non-fatal) and ``result``
(``status``, ``error``, ``stats`` with token counts; no reply text and no cost: the runner
puts the assistant text after the last tool call into the result). A line without
``timestamp`` is not Gemini CLI's: it yields nothing, so a log holding several backends'
runs can be read by trying each parser.
"""

from __future__ import annotations

import json
from typing import Any

from gateway_bot.agents.base import (
    AgentEvent,
    InitEvent,
    ResultEvent,
    TextEvent,
    ToolResultEvent,
    ToolUseEvent,
)
from gateway_bot.agents.claude.stream import one_line, path_tail

_TOOL_ARGUMENT = {
    "run_shell_command": "command",
    "read_file": "file_path",
    "read_many_files": "include",
    "write_file": "file_path",
    "replace": "file_path",
    "list_directory": "dir_path",
    "glob": "pattern",
    "grep_search": "pattern",
    "search_file_content": "pattern",
    "web_fetch": "prompt",
    "google_web_search": "query",
    "save_memory": "fact",
    "write_todos": "",
}
"""Which parameter says, in one line, what a tool call does."""


def parse_stream_line(line: str) -> list[AgentEvent]:
    """Parse one line; a line that is not JSON or not Gemini CLI's yields nothing."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return []
    if not isinstance(data, dict) or "timestamp" not in data:
        return []
    kind = data.get("type")
    if kind == "init":
        return [
            InitEvent(session_id=str(data.get("session_id", "")), model=str(data.get("model", "")))
        ]
    if kind == "message" and data.get("role") == "assistant" and data.get("content"):
        return [TextEvent(text=str(data["content"]))]
    if kind == "tool_use":
        tool = str(data.get("tool_name", "tool"))
        return [ToolUseEvent(tool=tool, summary=summarize_tool_use(tool, data.get("parameters")))]
    if kind == "tool_result":
        return [_tool_result(data)]
    if kind == "result":
        return [_result(data)]
    return []


def summarize_tool_use(tool: str, parameters: Any) -> str:
    if not isinstance(parameters, dict):
        return tool
    key = _TOOL_ARGUMENT.get(tool)
    if key == "":
        return tool
    value = parameters.get(key) if key else None
    if value is None:
        value = next((v for v in parameters.values() if isinstance(v, str)), "")
    if not value:
        return tool
    text = path_tail(str(value)) if key and key.endswith("path") else one_line(str(value))
    return f"{tool}: {text}"


def _tool_result(data: dict[str, Any]) -> ToolResultEvent:
    error = data.get("error")
    if isinstance(error, dict):
        summary = str(error.get("message", ""))
    else:
        summary = str(data.get("output", "") or "")
    return ToolResultEvent(is_error=data.get("status") != "success", summary=one_line(summary))


def _result(data: dict[str, Any]) -> ResultEvent:
    stats = data.get("stats") if isinstance(data.get("stats"), dict) else {}
    assert isinstance(stats, dict)
    error = data.get("error") if isinstance(data.get("error"), dict) else {}
    assert isinstance(error, dict)
    status = str(data.get("status", ""))
    return ResultEvent(
        is_error=status != "success",
        subtype=status if status == "success" else str(error.get("type") or status),
        text=str(error.get("message", "")) if status != "success" else "",
        session_id=None,
        cost_usd=0.0,
        num_turns=int(stats.get("tool_calls") or 0) + 1,
        duration_s=float(stats.get("duration_ms") or 0) / 1000.0,
        input_tokens=int(stats.get("input_tokens") or 0),
        output_tokens=int(stats.get("output_tokens") or 0),
    )
