"""Gemini CLI backend (npm ``@google/gemini-cli``): one headless ``gemini`` run per task.

The prompt goes in on stdin (no TTY: headless), ``--output-format stream-json`` gives the
events, ``--resume <session id>`` continues the conversation (sessions live under the
CLI's home, ``$GEMINI_CLI_HOME/.gemini/tmp/<project>/chats``, keyed by the working
directory like Claude Code's), ``--yolo`` approves every tool (the sandbox is the
boundary). Before each run the runner writes the CLI's settings into the conversation's
agent home: API-key auth (so ``GOOGLE_GEMINI_BASE_URL`` points it at any
Gemini-compatible endpoint, loopback http included), no folder-trust prompt, no update
checks or usage statistics (the sandbox allows only the model API), one attempt per request
(the daemon reports failures; the CLI's ten retries would take minutes), and the
interactive-only tools left out (``ask_user``, plan mode).

Not available: cost (the CLI reports tokens only) and a warm session (a headless run takes
one prompt).
"""

from __future__ import annotations

import json
import re

from gateway_bot.agents.base import AgentRequest
from gateway_bot.agents.cli_process import CliRun, CliRunner, CliStream
from gateway_bot.agents.event_log import EventLog
from gateway_bot.agents.gemini.stream import parse_stream_line
from gateway_bot.sandbox.base import ExecutionContext, Sandbox

SETTINGS_PATH = ".gemini/settings.json"

BLOCKED_TOOLS = ("ask_user", "enter_plan_mode", "exit_plan_mode")
"""Interactive-only tools: nobody is at a terminal to answer them."""

SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "general": {
        "enableAutoUpdate": False,
        "enableAutoUpdateNotification": False,
        "maxAttempts": 1,
    },
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "tools": {"exclude": list(BLOCKED_TOOLS)},
    "ui": {"hideBanner": True},
}

QUIET_ENV = {"GEMINI_CLI_NO_RELAUNCH": "true"}
"""The CLI otherwise starts a second node process of itself (for a larger heap)."""

_UNRESUMABLE = re.compile(
    r"Invalid session identifier|Error resuming session|\[API Error: .*\b4\d\d\b", re.IGNORECASE
)


class GeminiCliRunner(CliRunner):
    def build_argv(self, request: AgentRequest) -> list[str]:
        argv = [*self._command, "--output-format", "stream-json", "--yolo"]
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
        settings = json.dumps(SETTINGS, indent=2).encode()
        await sandbox.files(context).put_home_file(SETTINGS_PATH, settings)
        home = sandbox.paths(context).home
        env = {**QUIET_ENV, "GEMINI_CLI_HOME": home, **request.env}
        return CliRun(self.build_argv(request), env, CliStream(parse_stream_line), _UNRESUMABLE)
