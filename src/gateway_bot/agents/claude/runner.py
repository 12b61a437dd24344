"""Claude Code CLI backend: one ``claude -p`` run per task, its stream turned into events.

The prompt goes in on stdin; ``--resume`` continues the conversation's stored session. The
CLI's own update checks, telemetry and error reports are switched off: the sandbox allows
only the model API, and those calls would cost seconds of retries per run.
"""

from __future__ import annotations

import re

from gateway_bot.agents.base import AgentRequest, ToolPermissions
from gateway_bot.agents.claude.control import PERMISSION_FLAGS, answer_line, user_message_line
from gateway_bot.agents.claude.stream import parse_stream_line, with_turn_cost
from gateway_bot.agents.cli_process import CliRun, CliRunner, CliStream
from gateway_bot.agents.event_log import EventLog
from gateway_bot.sandbox.base import ExecutionContext, Sandbox

QUIET_ENV = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "IS_SANDBOX": "1",
}
"""IS_SANDBOX lets --dangerously-skip-permissions run as root: the sandbox is the boundary."""

BLOCKED_TOOLS = "AskUserQuestion,EnterPlanMode,ExitPlanMode,EnterWorktree,ExitWorktree"
BLOCKED_TOOLS_WITH_APPROVALS = "EnterPlanMode,ExitPlanMode,EnterWorktree,ExitWorktree"
"""With action approvals someone can answer the agent's questions: AskUserQuestion is a
card in the conversation (``core/actions/tool_permissions.py``)."""
"""Interactive-only tools: nobody is at a terminal to answer them, and a worktree the agent
switched into would leave the conversation's workspace (CLI 2.1.197 offers all five to
``-p`` runs unless they are named here; the first three it already drops by itself)."""

UNRESUMABLE = re.compile(
    r"prompt is too long|No conversation found with session ID|API Error: 4\d\d",
    re.IGNORECASE,
)


class ClaudeCodeRunner(CliRunner):
    def build_argv(self, request: AgentRequest) -> list[str]:
        argv = [*self._command, "-p", "--output-format", "stream-json", "--verbose"]
        if request.permissions is not None:
            # Every tool call is asked of the daemon (claude_control.py); the prompt goes in
            # as a stream-json message, so stdin stays open for the answers.
            argv += [
                *PERMISSION_FLAGS,
                "--input-format",
                "stream-json",
                "--disallowedTools",
                BLOCKED_TOOLS_WITH_APPROVALS,
            ]
        else:
            argv += ["--dangerously-skip-permissions", "--disallowedTools", BLOCKED_TOOLS]
        if request.resume_session_id:
            argv += ["--resume", request.resume_session_id]
        if request.model:
            argv += ["--model", request.model]
        return argv

    async def prepare(
        self,
        request: AgentRequest,
        sandbox: Sandbox,
        context: ExecutionContext,
        event_log: EventLog,
    ) -> CliRun:
        """With approvals the prompt is a stream-json line and stdin stays open for the
        answers to the CLI's permission requests."""
        asking = request.permissions is not None
        return CliRun(
            self.build_argv(request),
            agent_env(sandbox, context, request),
            claude_stream(request.permissions),
            UNRESUMABLE,
            prompt_line=user_message_line if asking else None,
            exit_grace_s=None,
        )


def claude_stream(permissions: ToolPermissions | None) -> CliStream:
    """The CLI's stream for one task: its permission requests answered with the task's
    decisions (refused when it has none: it should not have asked)."""

    async def answer(line: str) -> bytes | None:
        return await answer_line(line, permissions)

    return CliStream(parse_stream_line, answer, with_turn_cost)


def agent_env(sandbox: Sandbox, context: ExecutionContext, request: AgentRequest) -> dict[str, str]:
    """The CLI's environment: quiet, its config (and so its sessions) in the context's home."""
    paths = sandbox.paths(context)
    return {**QUIET_ENV, "CLAUDE_CONFIG_DIR": f"{paths.home}/.claude", **request.env}
