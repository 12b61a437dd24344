"""The stream-json parser on lines of the shapes the real CLI prints."""

from __future__ import annotations

import json

from gateway_bot.agents.base import (
    InitEvent,
    ResultEvent,
    TextEvent,
    ToolResultEvent,
    ToolUseEvent,
)
from gateway_bot.agents.claude.stream import parse_stream_line


def line(data: object) -> str:
    return json.dumps(data)


def test_a_run_becomes_typed_events() -> None:
    events = [
        *parse_stream_line(
            line(
                {
                    "type": "system",
                    "subtype": "init",
                    "session_id": "s-1",
                    "model": "claude-x",
                    "tools": ["Bash"],
                }
            )
        ),
        *parse_stream_line(
            line(
                {
                    "type": "assistant",
                    "message": {
                        "content": [
                            {"type": "text", "text": "Let me look."},
                            {
                                "type": "tool_use",
                                "id": "t1",
                                "name": "Bash",
                                "input": {"command": "ls -la\n  src", "description": "list"},
                            },
                        ]
                    },
                }
            )
        ),
        *parse_stream_line(
            line(
                {
                    "type": "user",
                    "message": {
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "t1",
                                "is_error": False,
                                "content": [{"type": "text", "text": "a\nb"}],
                            },
                        ]
                    },
                }
            )
        ),
        *parse_stream_line(
            line(
                {
                    "type": "result",
                    "subtype": "success",
                    "is_error": False,
                    "result": "Done.",
                    "session_id": "s-1",
                    "num_turns": 2,
                    "duration_ms": 1500,
                    "total_cost_usd": 0.0123,
                    "usage": {"input_tokens": 10, "output_tokens": 5},
                }
            )
        ),
    ]
    assert events == [
        InitEvent("s-1", "claude-x"),
        TextEvent("Let me look."),
        ToolUseEvent("Bash", "Bash: ls -la src"),
        ToolResultEvent(False, "a b"),
        ResultEvent(False, "success", "Done.", "s-1", 0.0123, 2, 1.5, 10, 5),
    ]


def test_tool_summaries_name_the_file_or_pattern() -> None:
    (edit,) = parse_stream_line(
        line(
            {
                "type": "assistant",
                "message": {
                    "content": [
                        {
                            "type": "tool_use",
                            "name": "Edit",
                            "input": {"file_path": "/w/app.py", "old": "x"},
                        }
                    ]
                },
            }
        )
    )
    assert edit == ToolUseEvent("Edit", "Edit: /w/app.py")
    (todo,) = parse_stream_line(
        line(
            {
                "type": "assistant",
                "message": {
                    "content": [{"type": "tool_use", "name": "TodoWrite", "input": {"todos": []}}]
                },
            }
        )
    )
    assert todo == ToolUseEvent("TodoWrite", "TodoWrite")


def test_noise_is_ignored() -> None:
    assert parse_stream_line("not json") == []
    assert parse_stream_line("[1, 2]") == []
    assert parse_stream_line(line({"type": "stream_event", "event": {}})) == []
    assert parse_stream_line(line({"type": "assistant", "message": "odd"})) == []


def test_long_paths_keep_their_file_name() -> None:
    path = "/state/" + "deep/" * 40 + "report.txt"
    (write,) = parse_stream_line(
        line(
            {
                "type": "assistant",
                "message": {
                    "content": [{"type": "tool_use", "name": "Write", "input": {"file_path": path}}]
                },
            }
        )
    )
    assert isinstance(write, ToolUseEvent)
    assert write.summary.endswith("/deep/report.txt")
    assert len(write.summary) <= len("Write: ") + 120


def test_a_bash_calls_declared_timeout_is_kept_in_seconds() -> None:
    def bash(tool_input: dict[str, object]) -> object:
        content = [{"type": "tool_use", "name": "Bash", "input": tool_input}]
        (event,) = parse_stream_line(line({"type": "assistant", "message": {"content": content}}))
        return event

    assert bash({"command": "make", "timeout": 600000}) == ToolUseEvent("Bash", "Bash: make", 600.0)
    assert bash({"command": "make"}) == ToolUseEvent("Bash", "Bash: make", None)
    assert bash({"command": "make", "timeout": "soon"}) == ToolUseEvent("Bash", "Bash: make")
