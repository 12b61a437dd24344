"""Claude Code CLI backend: one ``claude -p`` run per task, its stream turned into events.

The prompt goes in on stdin; ``--resume`` continues the conversation's stored session. The
CLI's own update checks, telemetry and error reports are switched off: the sandbox allows
only the model API, and those calls would cost seconds of retries per run.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from gateway_bot.agents.base import (
    AgentOutcome,
    AgentRequest,
    InitEvent,
    OnEvent,
    ResultEvent,
)
from gateway_bot.agents.claude.control import (
    PERMISSION_FLAGS,
    answer_control_request,
    parse_control_request,
    user_message_line,
)
from gateway_bot.agents.claude.stream import CREDENTIALS_REFUSED, parse_stream_line
from gateway_bot.agents.cli_install import api_origin, pinned_or_on_path
from gateway_bot.agents.event_log import EventLog
from gateway_bot.sandbox.base import (
    ExecutionContext,
    InjectedCredential,
    Sandbox,
    SandboxProcess,
)

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

DEFAULT_API_URL = "https://api.anthropic.com"

_CREDENTIAL_HEADERS = {
    # variable: (header the CLI sends it in, prefix of the header value, placeholder).
    # The proxy sets them in this order: with both tokens, ANTHROPIC_AUTH_TOKEN's wins.
    "ANTHROPIC_API_KEY": ("x-api-key", "", "sk-ant-api03-gateway-bot-placeholder"),
    "CLAUDE_CODE_OAUTH_TOKEN": (
        "authorization",
        "Bearer ",
        "sk-ant-oat01-gateway-bot-placeholder",
    ),
    "ANTHROPIC_AUTH_TOKEN": ("authorization", "Bearer ", "sk-ant-gateway-bot-placeholder"),
}


def injected_credentials(env: Mapping[str, str]) -> tuple[InjectedCredential, ...]:
    """The model credentials in the agent's ``env``, as a sandbox that filters egress should
    handle them: the agent holds a placeholder, the proxy adds the real header, only on
    requests to the model API (``ANTHROPIC_BASE_URL``, else the public API). So a repo or a
    prompt that makes the agent send its key elsewhere sends the placeholder."""
    scheme, hostname, port = api_origin(env.get("ANTHROPIC_BASE_URL") or DEFAULT_API_URL)
    host = hostname or urlsplit(DEFAULT_API_URL).hostname or ""
    return tuple(
        InjectedCredential(
            env_name=name,
            host=host,
            header=header,
            value=prefix + env[name],
            port=port,
            scheme=scheme,
            placeholder=placeholder,
        )
        for name, (header, prefix, placeholder) in _CREDENTIAL_HEADERS.items()
        if env.get(name)
    )


_UNRESUMABLE = re.compile(
    r"prompt is too long|No conversation found with session ID|API Error: 4\d\d",
    re.IGNORECASE,
)


class ClaudeCodeRunner:
    def __init__(self, command: Sequence[str]) -> None:
        self._command = list(command)

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

    async def run(
        self,
        request: AgentRequest,
        sandbox: Sandbox,
        context: ExecutionContext,
        event_log: EventLog,
        on_event: OnEvent,
    ) -> AgentOutcome:
        env = agent_env(sandbox, context, request)
        asking = request.permissions is not None
        process = await sandbox.start(
            context,
            self.build_argv(request),
            env,
            stdin_data=b"" if asking else request.prompt.encode(),
            keep_stdin=asking,
        )
        session_id: str | None = None
        result: ResultEvent | None = None
        timed_out = False
        try:
            async with asyncio.timeout(request.timeout_s):
                if asking:
                    await process.write(user_message_line(request.prompt))
                async for raw_line in process.stdout:
                    line = raw_line.decode("utf-8", "replace").strip()
                    if not line:
                        continue
                    await event_log.append(line)
                    if (control := parse_control_request(line)) is not None:
                        await process.write(
                            await answer_control_request(control, request.permissions)
                        )
                        continue
                    for event in parse_stream_line(line):
                        if isinstance(event, InitEvent):
                            session_id = event.session_id
                        elif isinstance(event, ResultEvent):
                            result = event
                            session_id = event.session_id or session_id
                            if asking:
                                process.close_stdin()  # one turn: the CLI then exits
                            if event.subtype == CREDENTIALS_REFUSED:
                                process.kill()  # it would retry the refused key for minutes
                        await on_event(event)
                exit_code: int | None = await process.wait()
        except TimeoutError:
            timed_out = True
            exit_code = await _kill(process)
        except BaseException:
            await _kill(process)
            raise
        finally:
            await event_log.end_run()
        stderr = await process.read_stderr()
        return AgentOutcome(
            result=result,
            session_id=session_id,
            exit_code=exit_code,
            stderr=stderr,
            timed_out=timed_out,
            unresumable=unresumable(request, result, stderr, timed_out=timed_out),
        )


def agent_env(sandbox: Sandbox, context: ExecutionContext, request: AgentRequest) -> dict[str, str]:
    """The CLI's environment: quiet, its config (and so its sessions) in the context's home."""
    paths = sandbox.paths(context)
    return {**QUIET_ENV, "CLAUDE_CONFIG_DIR": f"{paths.home}/.claude", **request.env}


def unresumable(
    request: AgentRequest, result: ResultEvent | None, stderr: str, *, timed_out: bool
) -> bool:
    """Did a run that resumed a session fail because that session cannot be continued?"""
    failure_text = (result.text if result and result.is_error else "") + "\n" + stderr
    return bool(
        request.resume_session_id
        and not timed_out
        and (result is None or result.is_error)
        and _UNRESUMABLE.search(failure_text)
    )


async def _kill(process: SandboxProcess) -> int | None:
    process.kill()
    with contextlib.suppress(Exception):
        return await asyncio.wait_for(process.wait(), timeout=10)
    return None


MODEL_ENV = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "CLAUDE_CODE_MAX_RETRIES",
)
"""Model-endpoint variables the agent inherits from the daemon's environment (or .env)."""


def credentials_problem(env: Mapping[str, str]) -> str | None:
    if any(env.get(name) for name in _CREDENTIAL_HEADERS):
        return None
    return (
        "No model credentials: set ANTHROPIC_API_KEY (or CLAUDE_CODE_OAUTH_TOKEN; for another "
        "Anthropic-compatible endpoint also ANTHROPIC_BASE_URL) in the environment, in .env, "
        "or under agent.env in the config."
    )


def locate_command(command: Sequence[str]) -> list[str]:
    """The command with ``claude`` found: one that is not on PATH is the one set-up pinned
    in the checkout's .tools/, so the default works in a shell whose PATH lacks it (the
    ``gateway-bot`` launcher's). PATH wins: an operator's own install is never
    second-guessed; paths and other names are left as they are."""
    return pinned_or_on_path(command, "claude")


def image_files(program: Path) -> dict[str, Path]:
    """The container runs the same pinned Claude Code as the host: its binary (the npm
    package's native build) goes into the image as ``claude``, the name repo Containerfiles
    copy too."""
    return {"claude": program.resolve()}
