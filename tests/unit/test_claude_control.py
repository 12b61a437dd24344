"""The control protocol between the daemon and Claude Code's permission prompts (decision 0087):
request lines parsed, answers written in the shape CLI 2.1.197 takes (checked end to end in
tests/integration/agents/test_action_approvals_claude.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway_bot.agents.base import AgentRequest, PermissionAnswer
from gateway_bot.agents.claude.control import (
    HOOK_SETTINGS,
    answer_control_request,
    parse_control_request,
)
from gateway_bot.agents.claude.runner import ClaudeCodeRunner

LINE = json.dumps(
    {
        "type": "control_request",
        "request_id": "r-1",
        "request": {
            "subtype": "can_use_tool",
            "tool_name": "Bash",
            "input": {"command": "git push"},
            "tool_use_id": "toolu_1",
        },
    }
)


class Deciding:
    def __init__(self, answer: PermissionAnswer) -> None:
        self.answer = answer
        self.asked: list[tuple[str, Mapping[str, Any]]] = []

    async def decide(self, tool_name: str, tool_input: Mapping[str, Any]) -> PermissionAnswer:
        self.asked.append((tool_name, tool_input))
        return self.answer


async def test_an_allow_echoes_the_input_and_a_deny_carries_the_reason() -> None:
    request = parse_control_request(LINE)
    assert request is not None
    allowing = Deciding(PermissionAnswer(True))
    allowed = json.loads(await answer_control_request(request, allowing))
    assert allowed == {
        "type": "control_response",
        "response": {
            "subtype": "success",
            "request_id": "r-1",
            "response": {"behavior": "allow", "updatedInput": {"command": "git push"}},
        },
    }
    assert allowing.asked == [("Bash", {"command": "git push"})]
    denied = json.loads(
        await answer_control_request(request, Deciding(PermissionAnswer(False, "not today")))
    )
    assert denied["response"]["response"] == {"behavior": "deny", "message": "not today"}


async def test_other_lines_and_subtypes() -> None:
    assert parse_control_request('{"type": "assistant", "message": {}}') is None
    assert parse_control_request("not json control_request") is None
    other = parse_control_request(LINE.replace("can_use_tool", "hook_callback"))
    assert other is not None
    answered = json.loads(await answer_control_request(other, Deciding(PermissionAnswer(True))))
    assert answered["response"]["subtype"] == "error"
    # Asked with nobody to ask (no approvals on this run): refused, never allowed.
    request = parse_control_request(LINE)
    assert request is not None
    nobody = json.loads(await answer_control_request(request, None))
    assert nobody["response"]["response"]["behavior"] == "deny"


def test_argv_asks_only_with_approvals_and_keeps_hooks_on() -> None:
    runner = ClaudeCodeRunner(["claude"])
    plain = runner.build_argv(AgentRequest("hi", None, None, 60))
    assert "--dangerously-skip-permissions" in plain
    assert "--permission-prompt-tool" not in plain
    asking = runner.build_argv(
        AgentRequest("hi", None, None, 60, {}, Deciding(PermissionAnswer(True)))
    )
    assert "--dangerously-skip-permissions" not in asking
    assert asking[asking.index("--permission-prompt-tool") + 1] == "stdio"
    assert asking[asking.index("--settings") + 1] == HOOK_SETTINGS
    blocked = asking[asking.index("--disallowedTools") + 1]
    assert "AskUserQuestion" not in blocked
    settings = json.loads(HOOK_SETTINGS)
    assert settings["disableAllHooks"] is False
    assert settings["permissions"]["defaultMode"] == "default"
