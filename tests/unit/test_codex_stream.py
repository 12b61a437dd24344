"""Codex CLI's ``exec --json`` lines (recorded from 0.169 against tests/support/fake_openai.py) as
the project's typed events."""

from __future__ import annotations

from gateway_bot.agents.base import (
    InitEvent,
    ResultEvent,
    TextEvent,
    ToolResultEvent,
    ToolUseEvent,
)
from gateway_bot.agents.codex.stream import parse_stream_line, shown_command
from gateway_bot.agents.registry import parse_any_line

RUN = [
    '{"type":"thread.started","thread_id":"01a215e3-6b66-7bc1-8471-9d8b6463bedd"}',
    '{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata '
    'for `gpt-5-codex` not found. Defaulting to fallback metadata"}}',
    '{"type":"turn.started"}',
    '{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":'
    '"/bin/bash -lc \'echo tool-ran\'","aggregated_output":"","exit_code":null,'
    '"status":"in_progress"}}',
    '{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":'
    '"/bin/bash -lc \'echo tool-ran\'","aggregated_output":"tool-ran\\n","exit_code":0,'
    '"status":"completed"}}',
    '{"type":"item.completed","item":{"id":"item_2","type":"agent_message",'
    '"text":"Echo: first question"}}',
    '{"type":"turn.completed","usage":{"input_tokens":13559,"cached_input_tokens":0,'
    '"cache_write_input_tokens":0,"output_tokens":97,"reasoning_output_tokens":0}}',
]


def test_a_turn_becomes_init_tool_call_result_text_and_usage() -> None:
    events = [event for line in RUN for event in parse_stream_line(line)]
    assert events == [
        InitEvent(session_id="01a215e3-6b66-7bc1-8471-9d8b6463bedd", model=""),
        ToolUseEvent(tool="shell", summary="shell: echo tool-ran"),
        ToolResultEvent(is_error=False, summary="tool-ran"),
        TextEvent(text="Echo: first question"),
        ResultEvent(
            is_error=False,
            subtype="success",
            text="",
            session_id=None,
            cost_usd=0.0,
            num_turns=1,
            duration_s=0.0,
            input_tokens=13559,
            output_tokens=97,
        ),
    ]
    assert [e for line in RUN for e in parse_any_line(line)] == events


def test_a_failed_turn_carries_its_message_and_edits_show_their_files() -> None:
    (failed,) = parse_stream_line(
        '{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized"}}'
    )
    assert isinstance(failed, ResultEvent)
    assert failed.is_error
    assert failed.text == "unexpected status 401 Unauthorized"
    edit = (
        '{"type":"item.completed","item":{"id":"i","type":"file_change","changes":'
        '[{"path":"/workspace/a.py","kind":"update"}],"status":"completed"}}'
    )
    assert parse_stream_line(edit) == [ToolUseEvent(tool="edit", summary="edit: /workspace/a.py")]
    assert shown_command("/bin/bash -lc 'echo '\\''quoted'\\'''") == "echo 'quoted'"
    assert parse_stream_line('{"type":"result","subtype":"success"}') == []
