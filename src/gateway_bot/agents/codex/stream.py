"""Codex CLI's ``codex exec --json`` lines -> typed agent events.

Pure functions over data, tested on recorded lines. Codex CLI 0.169 writes one JSON object
a line: ``thread.started`` (``thread_id``: the session to resume), ``turn.started``,
``item.started`` / ``item.updated`` / ``item.completed`` (``item.type``:
``command_execution`` with ``command``, ``aggregated_output``, ``exit_code``;
``agent_message`` with ``text``; ``file_change`` with ``changes``; ``mcp_tool_call``;
``web_search``; ``reasoning``; ``todo_list``; ``error`` for non-fatal notes),
``turn.completed`` (``usage``), ``turn.failed`` (``error.message``) and ``error``
(reconnect notices). No cost and no reply text in the last line: the runner takes the
agent message after the last tool call. Line types are dotted, so no other backend's line
is taken for Codex's.
"""

from __future__ import annotations

import json
import re
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

_SHELL_WRAPPER = re.compile(r"^(?:/bin/|/usr/bin/)?(?:ba)?sh -l?c '(.*)'$", re.DOTALL)


def parse_stream_line(line: str) -> list[AgentEvent]:
    """Parse one line; a line that is not JSON or not Codex's yields nothing."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return []
    if not isinstance(data, dict):
        return []
    kind = data.get("type")
    if kind == "thread.started":
        return [InitEvent(session_id=str(data.get("thread_id", "")), model="")]
    if kind in ("item.started", "item.completed") and isinstance(data.get("item"), dict):
        return _item(data["item"], completed=kind == "item.completed")
    if kind == "turn.completed":
        return [_result(data, failed=False)]
    if kind == "turn.failed":
        return [_result(data, failed=True)]
    return []


def shown_command(command: str) -> str:
    """The command as the model wrote it: Codex wraps it in ``/bin/bash -lc '...'``."""
    match = _SHELL_WRAPPER.match(command.strip())
    return match.group(1).replace("'\\''", "'") if match else command


def _item(item: dict[str, Any], *, completed: bool) -> list[AgentEvent]:
    kind = item.get("type")
    if kind == "command_execution":
        if not completed:
            command = one_line(shown_command(str(item.get("command", ""))))
            return [ToolUseEvent(tool="shell", summary=f"shell: {command}")]
        exit_code = item.get("exit_code")
        failed = item.get("status") == "failed" or (exit_code not in (0, None))
        output = one_line(str(item.get("aggregated_output", "") or ""))
        return [ToolResultEvent(is_error=failed, summary=output)]
    if kind == "agent_message" and completed and item.get("text"):
        return [TextEvent(text=str(item["text"]))]
    if kind == "file_change" and completed:
        changes = item.get("changes") if isinstance(item.get("changes"), list) else []
        assert isinstance(changes, list)
        paths = [path_tail(str(c.get("path", ""))) for c in changes if isinstance(c, dict)]
        return [ToolUseEvent(tool="edit", summary=f"edit: {', '.join(paths)}" if paths else "edit")]
    if kind == "mcp_tool_call" and not completed:
        tool = f"{item.get('server', '')}.{item.get('tool', '')}".strip(".") or "mcp"
        return [ToolUseEvent(tool=tool, summary=tool)]
    if kind == "web_search" and not completed:
        return [ToolUseEvent(tool="web_search", summary=f"web_search: {item.get('query', '')}")]
    return []


def _result(data: dict[str, Any], *, failed: bool) -> ResultEvent:
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    assert isinstance(usage, dict)
    error = data.get("error") if isinstance(data.get("error"), dict) else {}
    assert isinstance(error, dict)
    return ResultEvent(
        is_error=failed,
        subtype="error" if failed else "success",
        text=str(error.get("message", "")) if failed else "",
        session_id=None,
        cost_usd=0.0,
        num_turns=1,
        duration_s=0.0,
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
    )
