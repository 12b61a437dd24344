"""The Claude Code CLI as a backend: its descriptor (``agents/backend.py``), which ties the
cold runner (``runner.py``) and the warm one (``warm.py``, which builds on the cold one)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gateway_bot.agents.backend import AgentBackend, CredentialSpec
from gateway_bot.agents.base import WarmRunner, WarmSettings
from gateway_bot.agents.claude.runner import ClaudeCodeRunner
from gateway_bot.agents.claude.stream import parse_stream_line

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

CREDENTIALS = (
    CredentialSpec("ANTHROPIC_API_KEY", "x-api-key", "sk-ant-api03-gateway-bot-placeholder"),
    CredentialSpec(
        "CLAUDE_CODE_OAUTH_TOKEN",
        "authorization",
        "sk-ant-oat01-gateway-bot-placeholder",
        value_prefix="Bearer ",
    ),
    CredentialSpec(
        "ANTHROPIC_AUTH_TOKEN",
        "authorization",
        "sk-ant-gateway-bot-placeholder",
        value_prefix="Bearer ",
    ),
)
"""In the order the proxy sets them: with both tokens, ANTHROPIC_AUTH_TOKEN's wins."""


def image_files(program: Path) -> dict[str, Path]:
    """The container runs the same pinned Claude Code as the host: its binary (the npm
    package's native build) goes into the image as ``claude``, the name repo Containerfiles
    copy too."""
    return {"claude": program.resolve()}


def make_warm_runner(command: Sequence[str], settings: WarmSettings) -> WarmRunner:
    """Imported when a warm runner is made: a deployment without warm sessions never loads it."""
    from gateway_bot.agents.claude.warm import WarmClaudeRunner

    return WarmClaudeRunner(command, settings)


CLAUDE_CODE = AgentBackend(
    name="claude-code",
    default_command=("claude",),
    make_runner=ClaudeCodeRunner,
    parse_stream_line=parse_stream_line,
    env_names=MODEL_ENV,
    base_url_env="ANTHROPIC_BASE_URL",
    default_api_url="https://api.anthropic.com",
    credentials=CREDENTIALS,
    missing_credentials=(
        "No model credentials: set ANTHROPIC_API_KEY (or CLAUDE_CODE_OAUTH_TOKEN; for another "
        "Anthropic-compatible endpoint also ANTHROPIC_BASE_URL) in the environment, in .env, "
        "or under agent.env in the config."
    ),
    image_files=image_files,
    install_hint=(
        "run `bash scripts/setup.sh` (it installs the pinned Claude Code under .tools/), "
        "install it yourself (npm install -g @anthropic-ai/claude-code), "
        "or set agent.command in the config"
    ),
    make_warm_runner=make_warm_runner,
    asks_tool_calls=True,
)
"""The Claude Code CLI (``claude -p``, stream-json): the default backend."""
