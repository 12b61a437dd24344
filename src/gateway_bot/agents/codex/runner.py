"""Codex CLI backend (npm ``@openai/codex``): one ``codex exec`` run per task.

The prompt goes in on stdin (``-``), ``--json`` gives the events, ``exec ... resume <thread
id> -`` continues the conversation (sessions, "rollouts", live under ``$CODEX_HOME``, the
agent home's ``.codex``), ``--dangerously-bypass-approvals-and-sandbox`` runs every tool
without asking and without Codex's own sandbox (ours is the boundary). Everything else is
``-c`` overrides on the command line, nothing written to a file: a model provider
``gateway`` speaking the Responses API at ``OPENAI_BASE_URL`` (any compatible endpoint,
loopback http included) with the key from ``OPENAI_API_KEY``, no websocket transport (plain
HTTPS SSE, which the egress proxy passes), no retries (the daemon reports failures), no
update check, no analytics; code mode (a JavaScript tool runner), sub-agents and goals are
off so the model's tools are plain ``exec_command`` calls shown as progress steps.

Its ``usage`` on a resumed thread counts the thread's earlier runs: the runner subtracts
what the thread's last run in the conversation's log reported (``stream.thread_totals``).

Not available: cost (tokens only), a warm session, and turning off ``request_user_input``
(Codex offers it "only in Plan mode", which ``exec`` never enters).
"""

from __future__ import annotations

import re

from gateway_bot.agents.base import NOTHING_BEFORE, AgentRequest
from gateway_bot.agents.cli_process import CliRun, CliRunner, CliStream
from gateway_bot.agents.codex.stream import parse_stream_line, thread_totals
from gateway_bot.agents.event_log import EventLog
from gateway_bot.sandbox.base import ExecutionContext, Sandbox

DEFAULT_API_URL = "https://api.openai.com/v1"

DISABLED_FEATURES = ("code_mode", "multi_agent", "multi_agent_v2", "goals")

_UNRESUMABLE = re.compile(
    r"no rollout found for thread id|thread/resume failed|unexpected status 4\d\d", re.IGNORECASE
)


def config_flags(base_url: str) -> list[str]:
    """Codex's settings as ``-c`` overrides (TOML values)."""
    provider = "model_providers.gateway"
    settings = [
        "model_provider=gateway",
        f'{provider}.name="gateway"',
        f"{provider}.base_url={_toml_string(base_url)}",
        f'{provider}.env_key="OPENAI_API_KEY"',
        f'{provider}.wire_api="responses"',
        f"{provider}.supports_websockets=false",
        f"{provider}.request_max_retries=0",
        f"{provider}.stream_max_retries=0",
        "check_for_update_on_startup=false",
        "analytics.enabled=false",
    ]
    flags = [flag for setting in settings for flag in ("-c", setting)]
    return flags + [flag for feature in DISABLED_FEATURES for flag in ("--disable", feature)]


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class CodexRunner(CliRunner):
    def build_argv(self, request: AgentRequest) -> list[str]:
        base_url = request.env.get("OPENAI_BASE_URL") or DEFAULT_API_URL
        argv = [
            *self._command,
            "exec",
            "--json",
            "--dangerously-bypass-approvals-and-sandbox",
            "--skip-git-repo-check",
            *config_flags(base_url),
        ]
        if request.model:
            argv += ["--model", request.model]
        if request.resume_session_id:
            argv += ["resume", request.resume_session_id]
        return [*argv, "-"]

    async def prepare(
        self,
        request: AgentRequest,
        sandbox: Sandbox,
        context: ExecutionContext,
        event_log: EventLog,
    ) -> CliRun:
        await sandbox.files(context).make_home_dir(".codex")  # Codex refuses a CODEX_HOME not there
        home = sandbox.paths(context).home
        env = {"CODEX_HOME": f"{home}/.codex", **request.env}
        before = NOTHING_BEFORE
        if request.resume_session_id:  # its figures count the thread's earlier runs too
            before = thread_totals(await event_log.recent_lines(), request.resume_session_id)
        stream = CliStream(parse_stream_line)
        return CliRun(self.build_argv(request), env, stream, _UNRESUMABLE, before=before)
