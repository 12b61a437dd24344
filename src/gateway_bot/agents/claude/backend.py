"""The Claude Code CLI as a backend: its descriptor (``agents/backend.py``), which ties the
cold runner (``runner.py``) and the warm one (``warm.py``, which builds on the cold one)."""

from __future__ import annotations

from collections.abc import Sequence

from gateway_bot.agents.backend import AgentBackend
from gateway_bot.agents.base import WarmRunner, WarmSettings
from gateway_bot.agents.claude.runner import (
    DEFAULT_API_URL,
    MODEL_ENV,
    ClaudeCodeRunner,
    credentials_problem,
    image_files,
    injected_credentials,
    locate_command,
)
from gateway_bot.agents.claude.stream import parse_stream_line


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
    default_api_url=DEFAULT_API_URL,
    credentials_problem=credentials_problem,
    injected_credentials=injected_credentials,
    locate_command=locate_command,
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
