"""Claude Code's ``--output-format stream-json`` lines -> typed agent events.

Pure functions over data so that the parser is tested on recorded lines, without a CLI.
Unknown line types are ignored: the CLI adds new ones between versions.
"""

from __future__ import annotations

import json
import math
from typing import Any

from gateway_bot.agents.base import (
    AgentEvent,
    InitEvent,
    NoticeEvent,
    ResultEvent,
    TextEvent,
    ToolResultEvent,
    ToolUseEvent,
)

_SUMMARY_LIMIT = 120

_TOOL_ARGUMENT = {
    "Bash": "command",
    "Read": "file_path",
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
    "Glob": "pattern",
    "Grep": "pattern",
    "WebFetch": "url",
    "WebSearch": "query",
    "Task": "description",
    "TodoWrite": "",
}
"""Which input field says, in one line, what a tool call does."""


def parse_stream_line(line: str) -> list[AgentEvent]:
    """Parse one line; a line that is not JSON or not an event yields nothing."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return []
    if not isinstance(data, dict):
        return []
    kind = data.get("type")
    if kind == "system" and data.get("subtype") == "init":
        return [
            InitEvent(session_id=str(data.get("session_id", "")), model=str(data.get("model", "")))
        ]
    if kind == "system" and data.get("subtype") == "api_retry":
        if _credentials_refused(data):
            return [_credentials_refused_result(data)]
        return [NoticeEvent(_retry_notice(data))]
    if kind == "assistant":
        return [e for block in _content(data) if (e := _assistant_block(block)) is not None]
    if kind == "user":
        return [e for block in _content(data) if (e := _tool_result_block(block)) is not None]
    if kind == "result":
        return [_result(data)]
    return []


CREDENTIALS_REFUSED = "credentials_refused"
"""The subtype of the result made from the CLI's first retry after a 401: the CLI would
retry for minutes (ten attempts with back-off) behind a silent "Working on it"; a key the
API refused once is refused every time, so the run ends there (the runner stops the CLI)."""


def _credentials_refused(data: dict[str, Any]) -> bool:
    return data.get("error_status") == 401 or data.get("error") == "authentication_failed"


def _credentials_refused_result(data: dict[str, Any]) -> ResultEvent:
    return ResultEvent(
        is_error=True,
        subtype=CREDENTIALS_REFUSED,
        text=(
            "The model API refused the agent's credentials (HTTP 401): set a valid "
            "ANTHROPIC_API_KEY (or CLAUDE_CODE_OAUTH_TOKEN, made by `claude setup-token`) "
            "in gateway-bot's environment or .env, then start it again."
        ),
        session_id=str(data["session_id"]) if data.get("session_id") else None,
        cost_usd=0.0,
        num_turns=0,
        duration_s=0.0,
        input_tokens=0,
        output_tokens=0,
    )


def _retry_notice(data: dict[str, Any]) -> str:
    """One step for each of the CLI's retries (an unreachable or overloaded model API: ten
    attempts over some three minutes, which showed as nothing but "Working on it")."""
    status = data.get("error_status")
    what = f"HTTP {status}" if isinstance(status, int) else "no answer"
    error = data.get("error")
    if isinstance(error, str) and error:
        what += f" ({one_line(error)})"
    attempt, most = data.get("attempt"), data.get("max_retries")
    count = f", attempt {attempt} of {most}" if isinstance(attempt, int) and most else ""
    return f"model API: {what}; retrying{count}"


def summarize_tool_use(tool: str, tool_input: Any) -> str:
    if not isinstance(tool_input, dict):
        return tool
    key = _TOOL_ARGUMENT.get(tool)
    if key == "":
        return tool
    value = tool_input.get(key) if key else None
    if value is None:
        value = next((v for v in tool_input.values() if isinstance(v, str)), "")
    if not value:
        return tool
    text = path_tail(str(value)) if key and key.endswith("path") else one_line(str(value))
    return f"{tool}: {text}"


def _content(data: dict[str, Any]) -> list[Any]:
    message = data.get("message")
    if not isinstance(message, dict):
        return []
    content = message.get("content")
    return content if isinstance(content, list) else []


def _assistant_block(block: Any) -> AgentEvent | None:
    if not isinstance(block, dict):
        return None
    if block.get("type") == "text" and block.get("text"):
        return TextEvent(text=str(block["text"]))
    if block.get("type") == "tool_use":
        tool, tool_input = str(block.get("name", "tool")), block.get("input")
        return ToolUseEvent(
            tool=tool,
            summary=summarize_tool_use(tool, tool_input),
            timeout_s=_declared_timeout(tool_input),
        )
    return None


MAX_TOOL_TIMEOUT_MS = 600_000
"""The CLI's own cap on a Bash call's ``timeout``; a larger (or odd) value is ignored."""


def _declared_timeout(tool_input: Any) -> float | None:
    """Bash's ``timeout`` input, in milliseconds (the CLI caps it at 10 minutes)."""
    value = tool_input.get("timeout") if isinstance(tool_input, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or not 0 < value <= MAX_TOOL_TIMEOUT_MS:
        return None  # NaN would make the stall watch's sleep return at once, forever
    return float(value) / 1000.0


def _tool_result_block(block: Any) -> AgentEvent | None:
    if not isinstance(block, dict) or block.get("type") != "tool_result":
        return None
    content = block.get("content")
    if isinstance(content, list):
        content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ToolResultEvent(is_error=bool(block.get("is_error")), summary=one_line(str(content)))


def _result(data: dict[str, Any]) -> ResultEvent:
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    assert isinstance(usage, dict)
    return ResultEvent(
        is_error=bool(data.get("is_error")),
        subtype=str(data.get("subtype", "")),
        text=str(data.get("result", "") or ""),
        session_id=str(data["session_id"]) if data.get("session_id") else None,
        cost_usd=float(data.get("total_cost_usd") or 0.0),
        num_turns=int(data.get("num_turns") or 0),
        duration_s=float(data.get("duration_ms") or 0) / 1000.0,
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
    )


def path_tail(path: str) -> str:
    """Long paths keep their end: the file name is what a reader needs."""
    return path if len(path) <= _SUMMARY_LIMIT else "…" + path[-(_SUMMARY_LIMIT - 1) :]


def one_line(text: str) -> str:
    first = " ".join(text.split())
    return first if len(first) <= _SUMMARY_LIMIT else first[: _SUMMARY_LIMIT - 1] + "…"
