"""Claude Code's permission requests routed to the daemon (decision 0087, the tool-call guard).

With action approvals on, the CLI runs without ``--dangerously-skip-permissions``, in
stream-json input, with ``--permission-prompt-tool stdio``: before a tool call it may not
make by itself it writes (checked on CLI 2.1.197)::

    {"type": "control_request", "request_id": "…", "request": {"subtype": "can_use_tool",
     "tool_name": "Bash", "input": {"command": "git push"}, "tool_use_id": "…", …}}

and waits for ``{"type": "control_response", "response": {"subtype": "success",
"request_id": "…", "response": {"behavior": "allow", "updatedInput": {…}}}}`` (or
``"behavior": "deny", "message": "…"``, which the model reads as the tool's error). Default
mode lets read-only commands (``ls``, ``cat``) run without asking, so a PreToolUse hook
given on the command line answers ``ask`` for every call: every call then comes to the
daemon, which applies the project's own policy (``core/actions/policy.py``).

Given as ``--settings`` (flag settings outrank the user's and the project's), with
``disableAllHooks: false`` and ``defaultMode: default``: a ``.claude/settings.json`` the agent
or the repo wrote (``disableAllHooks``, ``bypassPermissions``, allow rules) then neither
drops the hook nor skips the request (checked on 2.1.197). The agent is root in its
container and could still change managed settings or run commands outside the CLI: this is
a guard against mistakes, not a boundary (docs/approvals.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway_bot.agents.base import PermissionAnswer, ToolPermissions

HOOK_REASON = "gateway-bot approvals"

_HOOK_OUTPUT = json.dumps(
    {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "ask",
            "permissionDecisionReason": HOOK_REASON,
        }
    }
)

HOOK_SETTINGS = json.dumps(
    {
        "disableAllHooks": False,
        "permissions": {"defaultMode": "default"},
        "hooks": {
            "PreToolUse": [
                {
                    "matcher": "*",
                    "hooks": [{"type": "command", "command": f"printf '%s' '{_HOOK_OUTPUT}'"}],
                }
            ]
        },
    }
)
"""The hook prints a fixed answer (no quote in it but the printf's own)."""

PERMISSION_FLAGS = (
    "--permission-mode",
    "default",
    "--permission-prompt-tool",
    "stdio",
    "--settings",
    HOOK_SETTINGS,
)


@dataclass(frozen=True)
class ControlRequest:
    request_id: str
    subtype: str
    tool_name: str
    tool_input: Mapping[str, Any]


def parse_control_request(line: str) -> ControlRequest | None:
    """The CLI's control request on ``line``, None for any other line."""
    if '"control_request"' not in line:
        return None
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or data.get("type") != "control_request":
        return None
    request = data.get("request")
    if not isinstance(request, dict):
        return None
    tool_input = request.get("input")
    return ControlRequest(
        request_id=str(data.get("request_id", "")),
        subtype=str(request.get("subtype", "")),
        tool_name=str(request.get("tool_name", "")),
        tool_input=tool_input if isinstance(tool_input, dict) else {},
    )


def control_response(request: ControlRequest, answer: PermissionAnswer) -> bytes:
    body: dict[str, Any]
    if answer.allow:
        updated = answer.updated_input if answer.updated_input is not None else request.tool_input
        body = {"behavior": "allow", "updatedInput": dict(updated)}
    else:
        body = {"behavior": "deny", "message": answer.message or "Not allowed."}
    response = {"subtype": "success", "request_id": request.request_id, "response": body}
    return (json.dumps({"type": "control_response", "response": response}) + "\n").encode()


def unsupported_response(request: ControlRequest) -> bytes:
    """A control request the gateway does not serve (the CLI's other subtypes)."""
    response = {
        "subtype": "error",
        "request_id": request.request_id,
        "error": f"gateway-bot does not handle {request.subtype!r}",
    }
    return (json.dumps({"type": "control_response", "response": response}) + "\n").encode()


def user_message_line(prompt: str) -> bytes:
    """One turn for ``--input-format stream-json``: a user message whose content is a list of
    blocks (the shape the CLI 2.1.x answers turn after turn; see AGENTS.md Gotchas)."""
    message = {
        "type": "user",
        "message": {"role": "user", "content": [{"type": "text", "text": prompt}]},
    }
    return (json.dumps(message) + "\n").encode()


async def answer_control_request(
    request: ControlRequest, permissions: ToolPermissions | None
) -> bytes:
    """The line to write back: the daemon's decision for a tool call; a refusal when the
    run has no one to ask (it should not have asked: nothing was configured)."""
    if request.subtype != "can_use_tool":
        return unsupported_response(request)
    if permissions is None:
        return control_response(
            request, PermissionAnswer(False, "No approvals are configured for this run.")
        )
    answer = await permissions.decide(request.tool_name, request.tool_input)
    return control_response(request, answer)
