"""The repo config: ``.gateway/config.yaml`` on the target repo's default branch.

Read at each task start from the mirror (not from the conversation's workspace), so an agent
cannot change its own limits by editing a file, and a merged change applies to every
conversation's next task.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, ValidationError

from gateway_bot.config.server import describe_validation_errors
from gateway_bot.config.yaml_tags import ConfigError, SecretRef, load_repo_yaml

REPO_CONFIG_PATH = ".gateway/config.yaml"


class RepoConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    model: str | None = None
    timeout_seconds: PositiveFloat | None = None
    container_env: dict[str, str | SecretRef] = Field(default_factory=dict)

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
        raise ConfigError(REPO_CONFIG_PATH, describe_validation_errors(exc)) from exc
