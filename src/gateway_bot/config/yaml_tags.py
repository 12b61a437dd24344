"""YAML loading with the two value tags our configs use.

- ``!env NAME`` (server config only): the value of an environment variable, or of the
  ``.env`` file beside the config. Missing variables are errors, not empty strings.
- ``!secret NAME`` (repo config only): a reference into the server's secrets pool, resolved
  by the server. A repo must not read the server's environment, so ``!env`` is refused there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml


class ConfigError(Exception):
    """A config problem a user fixes by editing a file; carries every problem found."""

    def __init__(self, source: str, problems: list[str]) -> None:
        super().__init__(f"{source}: " + "; ".join(problems))
        self.source = source
        self.problems = problems


@dataclass(frozen=True)
class SecretRef:
    """A ``!secret NAME`` in a repo config, resolved against the server's pool at task start."""

    name: str


def load_server_yaml(text: str, source: str, environ: Mapping[str, str]) -> Any:
    """Parse server config YAML, resolving ``!env`` from ``environ``."""
    missing: list[str] = []

    class Loader(yaml.SafeLoader):
        pass

    def env_tag(loader: yaml.SafeLoader, node: yaml.Node) -> str:
        name = str(loader.construct_scalar(node))  # type: ignore[arg-type]
        if name not in environ:
            missing.append(
                f"line {node.start_mark.line + 1}: !env {name} is not set "
                f"(hint: export {name}=... or add it to .env)"
            )
            return ""
        return environ[name]

    def secret_tag(loader: yaml.SafeLoader, node: yaml.Node) -> str:
        missing.append(f"line {node.start_mark.line + 1}: !secret belongs in repo configs")
        return ""

    Loader.add_constructor("!env", env_tag)
    Loader.add_constructor("!secret", secret_tag)
    data = _parse(text, source, Loader)
    if missing:
        raise ConfigError(source, missing)
    return data


def load_repo_yaml(text: str, source: str) -> Any:
    """Parse repo config YAML; ``!secret`` becomes a SecretRef, ``!env`` is an error."""
    problems: list[str] = []

    class Loader(yaml.SafeLoader):
        pass

    def env_tag(loader: yaml.SafeLoader, node: yaml.Node) -> str:
        problems.append(
            f"line {node.start_mark.line + 1}: !env is not allowed in a repo config "
            "(hint: use !secret NAME and define NAME in the server config's secrets)"
        )
        return ""

    def secret_tag(loader: yaml.SafeLoader, node: yaml.Node) -> SecretRef:
        return SecretRef(str(loader.construct_scalar(node)))  # type: ignore[arg-type]

    Loader.add_constructor("!env", env_tag)
    Loader.add_constructor("!secret", secret_tag)
    data = _parse(text, source, Loader)
    if problems:
        raise ConfigError(source, problems)
    return data


def _parse(text: str, source: str, loader: type[yaml.SafeLoader]) -> Any:
    try:
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        raise ConfigError(source, [f"not valid YAML: {exc}"]) from exc
