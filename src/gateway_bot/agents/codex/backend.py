"""Codex CLI as a backend: its descriptor (``agents/backend.py``) over the runner
(``runner.py``), and the native binary its image gets."""

from __future__ import annotations

import platform
from pathlib import Path

from gateway_bot.agents.backend import AgentBackend, CredentialSpec
from gateway_bot.agents.codex.runner import DEFAULT_API_URL, CodexRunner
from gateway_bot.agents.codex.stream import parse_stream_line

MODEL_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL")
"""Model-endpoint variables the agent inherits from the daemon's environment (or .env)."""

CREDENTIALS = (
    CredentialSpec(
        "OPENAI_API_KEY",
        "authorization",
        "sk-gateway-bot-placeholder-openai-key",
        value_prefix="Bearer ",
    ),
)

_TARGETS = {"x86_64": ("x64", "x86_64"), "aarch64": ("arm64", "aarch64")}


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
    name="codex",
    default_command=("codex",),
    make_runner=CodexRunner,
    parse_stream_line=parse_stream_line,
    env_names=MODEL_ENV,
    base_url_env="OPENAI_BASE_URL",
    default_api_url=DEFAULT_API_URL,
    credentials=CREDENTIALS,
    missing_credentials=(
        "No model credentials for Codex: set OPENAI_API_KEY (for another Responses-API "
        "endpoint also OPENAI_BASE_URL) in the environment, in .env, or under agent.env "
        "in the config."
    ),
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
