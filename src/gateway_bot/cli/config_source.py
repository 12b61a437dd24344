"""Where the command line's config comes from: a ``--config`` file, or the built-in default
(console channel, SQLite state, the git repo we are in or a sample repo made on first use),
and how an invalid one is told to the user (its source, then one line per problem).

Apart from cli/ (the commands) because every command needs a config the same way and
none of them needs to know how the built-in one is assembled.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from gateway_bot.cli.preflight import state_dir_problem
from gateway_bot.config.server import (
    ServerConfig,
    build_server_config,
    current_git_repo,
    load_server_config,
)
from gateway_bot.config.yaml_tags import ConfigError

BUILT_IN = "(built-in default config)"


def load_config(path: Path) -> ServerConfig | None:
    try:
        return load_server_config(path)
    except ConfigError as exc:
        print_config_error(exc)
        return None


def operator_config(path: Path | None) -> ServerConfig | None:
    """The config of an operator's command (``status``, ``approvals``, ``approve``, ``deny``,
    ``migrate``): the file given, else the built-in one's state, never making the sample
    repo (these only read the state or ask the daemon)."""
    if path is not None:
        return load_config(path)
    return build_server_config({"repo": {"url": "."}, "channels": {"console": {}}}, BUILT_IN)


def built_in_config(*, make_sample: bool = True) -> ServerConfig | None:
    """The embedded default: console channel, SQLite state, the git repo we are in (or a
    sample repo made on first use; ``make_sample=False``: only named, for ``check``)."""
    data: dict[str, Any] = {"channels": {"console": {}}}
    try:
        config = build_server_config({"repo": {"url": "."}, **data}, BUILT_IN)
    except ConfigError as exc:
        print_config_error(exc)
        return None
    repo = current_git_repo()
    if repo is None and not make_sample:
        repo = sample_repo_path(config.state_dir)
    if repo is None:  # the sample repo lives in the state dir: say first if it is unusable
        if (unusable := state_dir_problem(config.state_dir)) is not None:
            print(unusable, file=sys.stderr)
            return None
        repo = _sample_repo(config.state_dir)
    config.repo.url = str(repo)
    return config


def built_in_dotenv_dir() -> Path | None:
    """Where the built-in config reads ``.env``: the project root of the checkout this runs
    from, the file scripts/chat.sh reads (README), so ``gateway-bot chat`` from any
    directory finds the key put there. None for an install that is no checkout."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "pyproject.toml").is_file() and (root / "scripts").is_dir() else None


def sample_repo_path(state_dir: Path) -> Path:
    return state_dir / "sample-repo"


def _sample_repo(state_dir: Path) -> Path:
    repo = sample_repo_path(state_dir)
    if (repo / ".git").exists():
        return repo
    repo.mkdir(parents=True, exist_ok=True)
    (repo / "README.md").write_text(
        "# Sample repo\n\nA scratch repository for gateway-bot's console. Ask the agent to "
        "build something here.\n"
    )
    identity = ["-c", "user.name=gateway-bot", "-c", "user.email=gateway-bot@localhost"]
    for step in (
        ["init", "--quiet", "--initial-branch=main"],
        ["add", "README.md"],
        [*identity, "commit", "--quiet", "-m", "Sample repo"],
    ):
        subprocess.run(["git", "-C", str(repo), *step], check=True)
    return repo


def print_config_error(exc: ConfigError) -> None:
    print(f"{exc.source}: the config is not valid:", file=sys.stderr)
    for problem in exc.problems:
        print(f"  {problem}", file=sys.stderr)
