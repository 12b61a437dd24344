"""Gemini CLI's stream-json lines (recorded from 0.61 against tests/support/fake_gemini.py) as the
project's typed events, and the combined parser a conversation's events.jsonl is read with."""

from __future__ import annotations

from gateway_bot.agents.base import (
    InitEvent,
    ResultEvent,
    TextEvent,
    ToolResultEvent,
    ToolUseEvent,
)
from gateway_bot.agents.gemini.stream import parse_stream_line
from gateway_bot.agents.registry import parse_any_line

INIT = (
    '{"type":"init","timestamp":"2026-11-26T03:07:32.325Z",'
    '"session_id":"c04d9d5e-a2b2-4a89-b9eb-d29c8a4bb556","model":"gemini-2.5-flash"}'
)
USER = (
    '{"type":"message","timestamp":"2026-11-26T03:07:32.336Z","role":"user",'
    '"content":"first question\\n"}'
)
TOOL_USE = (
    '{"type":"tool_use","timestamp":"2026-11-26T03:07:32.944Z","tool_name":"run_shell_command",'
    '"tool_id":"run_shell_command__1795662452557_0","parameters":{"command":"echo tool-ran"}}'
)
TOOL_RESULT = (
    '{"type":"tool_result","timestamp":"2026-11-26T03:07:33.690Z",'
    '"tool_id":"run_shell_command__1795662452557_0","status":"success","output":"tool-ran"}'
)
TEXT = (
    '{"type":"message","timestamp":"2026-11-26T03:07:33.805Z","role":"assistant",'
    '"content":"Echo: first question","delta":true}'
)
RESULT = (
    '{"type":"result","timestamp":"2026-11-26T03:07:33.820Z","status":"success","stats":'
    '{"total_tokens":24618,"input_tokens":24579,"output_tokens":39,"cached":0,"input":24579,'
    '"duration_ms":1495,"tool_calls":1,"models":{}}}'
)
FAILED = (
    '{"type":"result","timestamp":"2026-11-26T03:05:27.391Z","status":"error","error":'
    '{"type":"unknown","message":"[API Error: exception TypeError: fetch failed sending '
    'request]"},"stats":{"total_tokens":0,"input_tokens":0,"output_tokens":0,"duration_ms":0,'
    '"tool_calls":0}}'
)


def test_a_turn_becomes_init_tool_call_result_text_and_usage() -> None:
    events = [
        e
        for line in (INIT, USER, TOOL_USE, TOOL_RESULT, TEXT, RESULT)
        for e in parse_stream_line(line)
    ]
    assert events == [
        InitEvent(session_id="c04d9d5e-a2b2-4a89-b9eb-d29c8a4bb556", model="gemini-2.5-flash"),
        ToolUseEvent(tool="run_shell_command", summary="run_shell_command: echo tool-ran"),
        ToolResultEvent(is_error=False, summary="tool-ran"),
        TextEvent(text="Echo: first question"),
        ResultEvent(
            is_error=False,
            subtype="success",
            text="",
            session_id=None,
            cost_usd=0.0,
            num_turns=2,
            duration_s=1.495,
            input_tokens=24579,
            output_tokens=39,
        ),
    ]


def test_a_failed_run_carries_the_error_message() -> None:
    (result,) = parse_stream_line(FAILED)
    assert isinstance(result, ResultEvent)
    assert result.is_error
    assert result.text == "[API Error: exception TypeError: fetch failed sending request]"


def test_file_tools_show_the_path_and_unknown_lines_nothing() -> None:
    line = TOOL_USE.replace('"run_shell_command"', '"write_file"').replace(
        '{"command":"echo tool-ran"}', '{"file_path":"/workspace/notes.md","content":"x"}'
    )
    assert parse_stream_line(line) == [
        ToolUseEvent(tool="write_file", summary="write_file: /workspace/notes.md")
    ]
    assert parse_stream_line("not json") == []
    assert parse_stream_line('{"type":"result","subtype":"success"}') == [], "not Gemini's"


def test_the_combined_parser_reads_either_backend_in_one_log() -> None:
    claude_result = (
        '{"type":"result","subtype":"success","is_error":false,"result":"hi",'
        '"session_id":"s","total_cost_usd":0.5,"num_turns":1,"usage":{}}'
    )
    (claude,) = parse_any_line(claude_result)
    assert isinstance(claude, ResultEvent)
    assert claude.text == "hi"
    assert claude.cost_usd == 0.5
    (gemini,) = parse_any_line(RESULT)
    assert isinstance(gemini, ResultEvent)
    assert gemini.input_tokens == 24579
