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
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from gateway_bot.agents.backend import AgentBackend
from gateway_bot.agents.base import AgentOutcome, AgentRequest, OnEvent
from gateway_bot.agents.cli_install import api_origin, pinned_or_on_path
from gateway_bot.agents.cli_process import CliRun, run_cli
from gateway_bot.agents.event_log import EventLog
from gateway_bot.agents.gemini.stream import parse_stream_line
from gateway_bot.sandbox.base import ExecutionContext, InjectedCredential, Sandbox

NAME = "gemini-cli"
DEFAULT_API_URL = "https://generativelanguage.googleapis.com"
PLACEHOLDER = "gateway-bot-placeholder-gemini-key"
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

MODEL_ENV = ("GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GEMINI_MODEL")
"""Model-endpoint variables the agent inherits from the daemon's environment (or .env)."""

_UNRESUMABLE = re.compile(
    r"Invalid session identifier|Error resuming session|\[API Error: .*\b4\d\d\b", re.IGNORECASE
)

LAUNCHER = Path(__file__).with_name("launcher.sh")
"""The image's ``gemini``: node running the bundle copied beside it."""


class GeminiCliRunner:
    def __init__(self, command: Sequence[str]) -> None:
        self._command = list(command)

    def build_argv(self, request: AgentRequest) -> list[str]:
        argv = [*self._command, "--output-format", "stream-json", "--yolo"]
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
        settings = json.dumps(SETTINGS, indent=2).encode()
        await sandbox.files(context).put_home_file(SETTINGS_PATH, settings)
        home = sandbox.paths(context).home
        env = {**QUIET_ENV, "GEMINI_CLI_HOME": home, **request.env}
        run = CliRun(self.build_argv(request), env, parse_stream_line, _UNRESUMABLE)
        return await run_cli(run, request, sandbox, context, event_log, on_event)


def injected_credentials(env: Mapping[str, str]) -> tuple[InjectedCredential, ...]:
    """``GEMINI_API_KEY`` stays with a filtering sandbox's egress proxy, which sends it as
    ``x-goog-api-key`` only to the model API; the agent holds a placeholder."""
    if not env.get("GEMINI_API_KEY"):
        return ()
    scheme, hostname, port = api_origin(env.get("GOOGLE_GEMINI_BASE_URL") or DEFAULT_API_URL)
    return (
        InjectedCredential(
            env_name="GEMINI_API_KEY",
            host=hostname or "generativelanguage.googleapis.com",
            header="x-goog-api-key",
            value=env["GEMINI_API_KEY"],
            port=port,
            scheme=scheme,
            placeholder=PLACEHOLDER,
        ),
    )


def credentials_problem(env: Mapping[str, str]) -> str | None:
    if env.get("GEMINI_API_KEY"):
        return None
    return (
        "No model credentials for Gemini CLI: set GEMINI_API_KEY (for another "
        "Gemini-compatible endpoint also GOOGLE_GEMINI_BASE_URL) in the environment, in "
        ".env, or under agent.env in the config."
    )


def locate_command(command: Sequence[str]) -> list[str]:
    """``gemini`` from PATH, else the one set-up pinned in the checkout's .tools/."""
    return pinned_or_on_path(command, "gemini")


def image_files(program: Path) -> dict[str, Path]:
    """Gemini CLI is a node bundle: the image gets the host's node, the bundle directory
    the host's ``gemini`` runs (``gemini-cli/...``), and a launcher named ``gemini``."""
    package = program.resolve().parent.parent  # .../@google/gemini-cli (bin: bundle/gemini.js)
    node = shutil.which("node")
    files = {
        f"gemini-cli/{path.relative_to(package)}": path
        for path in sorted((package / "bundle").rglob("*"))
        if path.is_file() and not path.is_symlink()
    }
    files["gemini-cli/package.json"] = package / "package.json"
    files["gemini"] = LAUNCHER
    if node is not None:
        files["node"] = Path(node).resolve()
    return files


GEMINI_CLI = AgentBackend(
    name=NAME,
    default_command=("gemini",),
    make_runner=GeminiCliRunner,
    parse_stream_line=parse_stream_line,
    env_names=MODEL_ENV,
    base_url_env="GOOGLE_GEMINI_BASE_URL",
    default_api_url=DEFAULT_API_URL,
    credentials_problem=credentials_problem,
    injected_credentials=injected_credentials,
    locate_command=locate_command,
    image_files=image_files,
    install_hint=(
        "run `bash scripts/setup.sh` (it installs the pinned Gemini CLI under .tools/), "
        "install it yourself (npm install -g @google/gemini-cli), "
        "or set agent.backends.gemini-cli.command in the config"
    ),
    limitations=(
        "report cost (it reports tokens only)",
        "keep a warm session (each turn starts the CLI: seconds of node start-up)",
    ),
)
"""Gemini CLI (``gemini``, headless, stream-json)."""
