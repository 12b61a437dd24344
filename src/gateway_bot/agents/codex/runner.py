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

Not available: cost (tokens only), a warm session, and turning off ``request_user_input``
(Codex offers it "only in Plan mode", which ``exec`` never enters).
"""

from __future__ import annotations

import platform
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from gateway_bot.agents.backend import AgentBackend
from gateway_bot.agents.base import AgentOutcome, AgentRequest, OnEvent
from gateway_bot.agents.cli_install import api_origin, pinned_or_on_path
from gateway_bot.agents.cli_process import CliRun, run_cli
from gateway_bot.agents.codex.stream import parse_stream_line
from gateway_bot.agents.event_log import EventLog
from gateway_bot.sandbox.base import ExecutionContext, InjectedCredential, Sandbox

NAME = "codex"
DEFAULT_API_URL = "https://api.openai.com/v1"
PLACEHOLDER = "sk-gateway-bot-placeholder-openai-key"

MODEL_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL")
"""Model-endpoint variables the agent inherits from the daemon's environment (or .env)."""

DISABLED_FEATURES = ("code_mode", "multi_agent", "multi_agent_v2", "goals")

_UNRESUMABLE = re.compile(
    r"no rollout found for thread id|thread/resume failed|unexpected status 4\d\d", re.IGNORECASE
)

_TARGETS = {"x86_64": ("x64", "x86_64"), "aarch64": ("arm64", "aarch64")}


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


class CodexRunner:
    def __init__(self, command: Sequence[str]) -> None:
        self._command = list(command)

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

    async def run(
        self,
        request: AgentRequest,
        sandbox: Sandbox,
        context: ExecutionContext,
        event_log: EventLog,
        on_event: OnEvent,
    ) -> AgentOutcome:
        await sandbox.files(context).make_home_dir(".codex")  # Codex refuses a CODEX_HOME not there
        home = sandbox.paths(context).home
        env = {"CODEX_HOME": f"{home}/.codex", **request.env}
        run = CliRun(self.build_argv(request), env, parse_stream_line, _UNRESUMABLE)
        return await run_cli(run, request, sandbox, context, event_log, on_event)


def injected_credentials(env: Mapping[str, str]) -> tuple[InjectedCredential, ...]:
    """``OPENAI_API_KEY`` stays with a filtering sandbox's egress proxy, which sends it as
    ``Authorization: Bearer`` only to the model API; the agent holds a placeholder."""
    if not env.get("OPENAI_API_KEY"):
        return ()
    scheme, hostname, port = api_origin(env.get("OPENAI_BASE_URL") or DEFAULT_API_URL)
    return (
        InjectedCredential(
            env_name="OPENAI_API_KEY",
            host=hostname or "api.openai.com",
            header="authorization",
            value="Bearer " + env["OPENAI_API_KEY"],
            port=port,
            scheme=scheme,
            placeholder=PLACEHOLDER,
        ),
    )


def credentials_problem(env: Mapping[str, str]) -> str | None:
    if env.get("OPENAI_API_KEY"):
        return None
    return (
        "No model credentials for Codex: set OPENAI_API_KEY (for another Responses-API "
        "endpoint also OPENAI_BASE_URL) in the environment, in .env, or under agent.env "
        "in the config."
    )


def locate_command(command: Sequence[str]) -> list[str]:
    """``codex`` from PATH, else the one set-up pinned in the checkout's .tools/."""
    return pinned_or_on_path(command, "codex")


def native_binary(program: Path) -> Path:
    """The static musl binary the npm package's node shim (``bin/codex.js``) would start:
    the image gets it alone, no node needed."""
    resolved = program.resolve()
    if resolved.suffix != ".js":
        return resolved  # already a binary (an operator's own install)
    arch, triple = _TARGETS.get(platform.machine(), ("x64", "x86_64"))
    scope = resolved.parent.parent.parent  # node_modules/@openai
    vendor = scope / f"codex-linux-{arch}" / "vendor" / f"{triple}-unknown-linux-musl"
    return vendor / "bin" / "codex"


def image_files(program: Path) -> dict[str, Path]:
    return {"codex": native_binary(program)}


CODEX = AgentBackend(
    name=NAME,
    default_command=("codex",),
    make_runner=CodexRunner,
    parse_stream_line=parse_stream_line,
    env_names=MODEL_ENV,
    base_url_env="OPENAI_BASE_URL",
    default_api_url=DEFAULT_API_URL,
    credentials_problem=credentials_problem,
    injected_credentials=injected_credentials,
    locate_command=locate_command,
    image_files=image_files,
    install_hint=(
        "run `bash scripts/setup.sh` (it installs the pinned Codex CLI under .tools/), "
        "install it yourself (npm install -g @openai/codex), "
        "or set agent.backends.codex.command in the config"
    ),
    limitations=(
        "report cost (it reports tokens only)",
        "keep a warm session (each turn starts the CLI)",
        "leave out request_user_input (it says the tool works only in Plan mode)",
    ),
)
"""Codex CLI (``codex exec --json``)."""
