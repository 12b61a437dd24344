"""What the agent's CLI prints is hostile (the agent is root in its container and can
replace the CLI the next task runs), and so is a stranger's display name: attack tests for
the places that read them on the host.

Before: a Bash ``timeout`` of NaN made the stall watch's sleep return at once (the daemon's
event loop spun at full CPU for the rest of the task); a usage count that was not a number
made the conversation's dashboard page fail for good; `gateway-bot approve` printed the
stranger's name with its escape sequences to the operator's terminal; a config path with a
line break wrote a directive of its own into the systemd unit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway_bot.agents.base import ToolUseEvent
from gateway_bot.agents.claude.stream import parse_stream_line
from gateway_bot.agents.registry import parse_any_line
from gateway_bot.cli import approvals as approvals_command
from gateway_bot.core.conversations.timeline import agent_entries
from gateway_bot.runtime.service_unit import UnitSettings, UnsafeUnitValue, render_unit


def _bash(timeout: object) -> str:
    block = {"type": "tool_use", "id": "t1", "name": "Bash",
             "input": {"command": "sleep 1", "timeout": timeout}}  # fmt: skip
    return json.dumps({"type": "assistant", "message": {"content": [block]}})


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -5, 10**30, "600000", True])
def test_an_odd_declared_timeout_extends_nothing(timeout: object) -> None:
    (event,) = parse_stream_line(_bash(timeout))
    assert isinstance(event, ToolUseEvent)
    assert event.timeout_s is None


def test_a_sane_declared_timeout_is_kept() -> None:
    (event,) = parse_stream_line(_bash(120_000))
    assert isinstance(event, ToolUseEvent)
    assert event.timeout_s == 120.0


def test_a_line_that_does_not_parse_is_shown_not_raised() -> None:
    lines = [
        json.dumps({"type": "turn.completed", "usage": {"input_tokens": "x"}}),
        json.dumps(
            {
                "type": "result",
                "subtype": "success",
                "usage": {"input_tokens": [1]},
                "total_cost_usd": "many",
                "num_turns": {},
            }
        ),
        _bash(1000),
    ]
    entries = agent_entries(lines, parse_any_line)
    assert entries, "the page still renders a timeline"
    assert any("sleep 1" in entry.text for entry in entries), "good lines are still shown"


def test_a_strangers_escape_sequences_never_reach_the_operators_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    name = "Mallory\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J"
    monkeypatch.setattr(
        approvals_command,
        "ask_daemon",
        lambda state_dir, request: {"ok": True, "text": f"Allowed {name} in room x."},
    )
    assert approvals_command.run_decision(tmp_path, "ABCD", "allow", "@owner:hs") == 0
    shown = capsys.readouterr().out
    assert "\x1b" not in shown
    assert "\x07" not in shown
    assert "Allowed Mallory" in shown


def test_a_line_break_never_becomes_a_directive_in_the_unit(tmp_path: Path) -> None:
    settings = UnitSettings(
        config=tmp_path / "x\nExecStartPre=/bin/sh -c id\n.yaml",
        environment_file=tmp_path / ".env",
        program=("/usr/bin/gateway-bot",),
        path_variable="/usr/bin",
        shutdown_timeout_s=30,
    )
    with pytest.raises(UnsafeUnitValue):
        render_unit(settings)
