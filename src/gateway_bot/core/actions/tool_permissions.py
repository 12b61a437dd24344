"""One task's answers to its agent's tool calls (decision 0087): the policy decides, and where it
says ``ask`` a person does, through ``ActionApprovals.ask`` (a card in the conversation).

AskUserQuestion comes the same way: each question with its options becomes a card, and the
answer goes back as the tool's ``answers`` (the CLI tells the model ``"question"="answer"``).
No answer in time: the tool is refused with a message saying nobody answered.

While a person is asked, the task's stall watch is held (``hold``/``release``): waiting
for an answer is not the agent being stuck.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from gateway_bot.agents.base import PermissionAnswer
from gateway_bot.config.action_rules import ActionApprovalSettings, RuleAction
from gateway_bot.core.actions.approvals import ActionRequest, AskAction
from gateway_bot.core.actions.policy import ToolCall, evaluate, signature

log = logging.getLogger(__name__)

QUESTION_TOOL = "AskUserQuestion"
_DETAIL_CHARS = 3000
_EDIT_LINES = 12


class ConversationToolPermissions:
    def __init__(
        self,
        policy: ActionApprovalSettings,
        ask: AskAction,
        conversation_id: str,
        task_id: str,
        workdir: str,
        *,
        hold: Callable[[], None] = lambda: None,
        release: Callable[[], None] = lambda: None,
    ) -> None:
        self._policy = policy
        self._ask = ask
        self._conversation_id = conversation_id
        self._task_id = task_id
        self._workdir = workdir
        self._hold = hold
        self._release = release

    async def decide(self, tool_name: str, tool_input: Mapping[str, Any]) -> PermissionAnswer:
        if tool_name == QUESTION_TOOL:
            return await self._question(tool_input)
        call = ToolCall(tool_name, tool_input)
        verdict = evaluate(self._policy, call)
        if verdict.action is RuleAction.ALLOW:
            return PermissionAnswer(True, updated_input=tool_input)
        if verdict.action is RuleAction.DENY:
            log.info("task %s: %s refused by rule %s", self._task_id, tool_name, verdict.rule)
            return PermissionAnswer(
                False, f"Refused by the gateway's approvals policy (rule {verdict.rule})."
            )
        request = ActionRequest(
            conversation_id=self._conversation_id,
            task_id=self._task_id,
            kind="tool",
            summary=_summary(call),
            details=describe_call(call, self._workdir),
            rule=verdict.rule,
            signature=signature(call),
        )
        decision = await self._asking(request)
        if decision.allowed:
            return PermissionAnswer(True, updated_input=tool_input)
        return PermissionAnswer(False, f"The user did not allow this: {decision.reason}.")

    async def _question(self, tool_input: Mapping[str, Any]) -> PermissionAnswer:
        questions = tool_input.get("questions")
        if not isinstance(questions, list) or not questions:
            return PermissionAnswer(False, "The question had no questions in it.")
        answers: dict[str, str] = {}
        for question in questions:
            if not isinstance(question, dict):
                continue
            text = str(question.get("question", "")).strip()
            options = tuple(
                str(option.get("label", "")) if isinstance(option, dict) else str(option)
                for option in question.get("options") or []
            )
            request = ActionRequest(
                conversation_id=self._conversation_id,
                task_id=self._task_id,
                kind="question",
                summary=text,
                details=text,
                rule="",
                signature=f"question {text}",
                options=options,
            )
            decision = await self._asking(request)
            if not decision.allowed or decision.answer is None:
                return PermissionAnswer(
                    False, f"No answer came: {decision.reason}. Continue without one."
                )
            answers[text] = decision.answer
        return PermissionAnswer(True, updated_input={**tool_input, "answers": answers})

    async def _asking(self, request: ActionRequest) -> Any:
        self._hold()
        try:
            return await self._ask(request)
        finally:
            self._release()


def _summary(call: ToolCall) -> str:
    target = call.command or call.path or call.url
    return " ".join((target or call.tool).split())[:200]


def describe_call(call: ToolCall, workdir: str) -> str:
    """What the card shows verbatim: the full command and where it runs; a file and a
    summary of what changes in it; any other tool's input."""
    if call.command is not None:
        return f"$ {call.command}\n(in {workdir})"[:_DETAIL_CHARS]
    if call.path is not None:
        lines = [f"{call.tool} {call.path}"]
        old, new = call.input.get("old_string"), call.input.get("new_string")
        content = call.input.get("content")
        if isinstance(old, str) and isinstance(new, str):
            lines += [f"- {line}" for line in old.splitlines()[:_EDIT_LINES]]
            lines += [f"+ {line}" for line in new.splitlines()[:_EDIT_LINES]]
        elif isinstance(content, str):
            count = len(content.splitlines())
            lines.append(f"({count} lines, {len(content.encode())} bytes)")
            lines += [f"+ {line}" for line in content.splitlines()[:_EDIT_LINES]]
        return "\n".join(lines)[:_DETAIL_CHARS]
    shown = json.dumps(dict(call.input), indent=1, sort_keys=True, default=str)
    return f"{call.tool}\n{shown}"[:_DETAIL_CHARS]
