"""The repo config: ``.gateway/config.yaml`` on the target repo's default branch.

Read at each task start from the mirror (not from the conversation's workspace), so an agent
cannot change its own limits by editing a file, and a merged change applies to every
conversation's next task.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, ValidationError, field_validator

from gateway_bot.config.action_rules import RepoActionApprovals
from gateway_bot.config.validation import describe_validation_errors
from gateway_bot.config.yaml_tags import ConfigError, SecretRef, load_repo_yaml

REPO_CONFIG_PATH = ".gateway/config.yaml"

MODEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:/@\[\]-]{0,127}$"
"""A model name as the agent CLI's ``--model`` gets it (from a repo or ``/model``): never
starting with ``-`` (it would read as another option), no spaces, at most 128 characters."""

_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
REFUSED_ENV = frozenset(
    {
        "PATH",
        "HOME",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "CLAUDE_CONFIG_DIR",
        "GEMINI_API_KEY",
        "GOOGLE_GEMINI_BASE_URL",
        "GEMINI_CLI_HOME",
        "GEMINI_CLI_SYSTEM_SETTINGS_PATH",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "CODEX_HOME",
    }
)
"""Variables a repo may not set for the agent: the search path and the loader's (``LD_*``)
would change what runs, the rest are the agent's credentials and where they go."""


class RepoConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    model: str | None = Field(default=None, pattern=MODEL_NAME)
    agent: str | None = Field(
        default=None,
        description="The agent CLI for this repo's new sessions: one the server enables.",
    )
    timeout_seconds: PositiveFloat | None = None
    container_env: dict[str, str | SecretRef] = Field(default_factory=dict)
    approvals: RepoActionApprovals | None = Field(
        default=None,
        description="Action approvals rules added to the server's; only stricter ones count.",
    )

    @field_validator("container_env")
    @classmethod
    def _safe_names(cls, env: dict[str, str | SecretRef]) -> dict[str, str | SecretRef]:
        problems = []
        for name, value in env.items():
            if not _ENV_NAME.fullmatch(name):  # `$` alone takes "NAME\n"
                problems.append(f"{name!r} is not a variable name ([A-Z_][A-Z0-9_]*)")
            elif name in REFUSED_ENV or name.startswith("LD_"):
                problems.append(
                    f"{name} may not be set by the repo (PATH, HOME, LD_* and the agent's "
                    "model credentials are the server's to set)"
                )
            elif isinstance(value, str) and any(ch in value for ch in "\n\r\0"):
                problems.append(f"{name}: a value may not contain a line break")
        if problems:
            raise ValueError("; ".join(problems))
        return env

    def resolved_env(self, secrets: Mapping[str, str]) -> dict[str, str]:
        """Container env with every ``!secret`` replaced from the server's pool."""
        env: dict[str, str] = {}
        missing = []
        for key, value in self.container_env.items():
            if isinstance(value, SecretRef):
                if value.name not in secrets:
                    missing.append(
                        f"container_env.{key}: secret {value.name!r} is not in the server "
                        "config's secrets (hint: add it there)"
                    )
                    continue
                env[key] = secrets[value.name]
            else:
                env[key] = value
        if missing:
            raise ConfigError(REPO_CONFIG_PATH, missing)
        return env


def parse_repo_config(text: str | None) -> RepoConfig:
    """Parse the file's text; a repo without the file gets the defaults."""
    if text is None:
        return RepoConfig()
    data: Any = load_repo_yaml(text, REPO_CONFIG_PATH)
    if data is None:
        return RepoConfig()
    if not isinstance(data, dict):
        raise ConfigError(REPO_CONFIG_PATH, ["the top level must be a mapping"])
    try:
        return RepoConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(REPO_CONFIG_PATH, describe_validation_errors(exc, RepoConfig)) from exc
