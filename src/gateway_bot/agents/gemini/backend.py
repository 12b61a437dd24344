"""Gemini CLI as a backend: its descriptor (``agents/backend.py``) over the runner
(``runner.py``), and what its image needs (a node bundle, not one binary)."""

from __future__ import annotations

import shutil
from pathlib import Path

from gateway_bot.agents.backend import AgentBackend, CredentialSpec
from gateway_bot.agents.gemini.runner import GeminiCliRunner
from gateway_bot.agents.gemini.stream import parse_stream_line

MODEL_ENV = ("GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GEMINI_MODEL")
"""Model-endpoint variables the agent inherits from the daemon's environment (or .env)."""

CREDENTIALS = (
    CredentialSpec("GEMINI_API_KEY", "x-goog-api-key", "gateway-bot-placeholder-gemini-key"),
)

LAUNCHER = Path(__file__).with_name("launcher.sh")
"""The image's ``gemini``: node running the bundle copied beside it."""


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
    name="gemini-cli",
    default_command=("gemini",),
    make_runner=GeminiCliRunner,
    parse_stream_line=parse_stream_line,
    env_names=MODEL_ENV,
    base_url_env="GOOGLE_GEMINI_BASE_URL",
    default_api_url="https://generativelanguage.googleapis.com",
    credentials=CREDENTIALS,
    missing_credentials=(
        "No model credentials for Gemini CLI: set GEMINI_API_KEY (for another "
        "Gemini-compatible endpoint also GOOGLE_GEMINI_BASE_URL) in the environment, in "
        ".env, or under agent.env in the config."
    ),
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
