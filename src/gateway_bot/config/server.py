"""The server config: one YAML file (plus environment overrides) for the whole daemon.

Read through pydantic-settings so every value can also come from the environment
(``GATEWAY_BOT_AGENT__MODEL=...`` overrides ``agent.model``); YAML values may use
``!env NAME``, resolved from the process environment and the ``.env`` file beside the
config. Every validation problem is reported with its key path and a hint, all at once.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, ClassVar, Literal

from dotenv import dotenv_values
from pydantic import (
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from gateway_bot.config.access import AccessSettings, known_zone
from gateway_bot.config.agent import AgentSettings
from gateway_bot.config.channels import ChannelsSettings
from gateway_bot.config.dashboard import DashboardSettings
from gateway_bot.config.ha import HaSettings
from gateway_bot.config.sandbox import SandboxSettings
from gateway_bot.config.section import Section
from gateway_bot.config.validation import describe_validation_errors
from gateway_bot.config.yaml_tags import ConfigError, load_server_yaml


class RepoSettings(Section):
    url: str = Field(description="The git repository conversations work on (URL or local path).")
    default_branch: str | None = Field(
        default=None, description="Branch new workspaces start from; the remote HEAD if unset."
    )


class ExecutionSettings(Section):
    max_concurrent_tasks: PositiveInt = 3
    max_pending_per_conversation: PositiveInt = 3
    shutdown_timeout_seconds: float = Field(default=30.0, ge=0)
    conversation_disk_limit_mb: PositiveFloat = Field(
        default=5000.0,
        description="Most a conversation's workspace, home, inbox, outbox and storage may "
        "hold together: a task over it is stopped, a task that would start over it refused.",
    )
    disk_check_interval_seconds: PositiveFloat = Field(
        default=10.0, description="How often a running task's directories are measured."
    )
    events_log_limit_mb: PositiveFloat = Field(
        default=50.0,
        description="Most a conversation's events.jsonl grows to; then it is cut with a note.",
    )
    reply_limit_chars: PositiveInt = Field(
        default=40_000,
        description="A longer reply is sent as its beginning plus the whole as reply.md.",
    )


class StateSettings(Section):
    retention_days: PositiveFloat = Field(
        default=30.0,
        description="Completed tasks' message bodies and channels' send records older than "
        "this are pruned (at start, then daily); the tasks themselves and their outcome stay.",
    )
    url: str | None = Field(
        default=None,
        description="A postgresql:// URL (write it as a !env value: it may hold a password): "
        "the state lives in that PostgreSQL database. Unset: <state_dir>/state.db (SQLite).",
    )
    pool_size: PositiveInt = Field(
        default=10, description="Most PostgreSQL connections the daemon holds (with url)."
    )

    @field_validator("url")
    @classmethod
    def _postgres_only(cls, url: str | None) -> str | None:
        # The message never repeats the value: the URL may hold a password.
        if url is not None and not url.startswith(("postgresql://", "postgres://")):
            raise ValueError("must be a postgresql:// URL (unset: SQLite in state_dir)")
        return url


class LoggingSettings(Section):
    """The daemon's log on stderr (``gateway_bot/runtime/logs.py``)."""

    format: Literal["console", "json"] = Field(
        default="console",
        description="console: one readable line each; json: one JSON object per line. "
        "Both carry task_id and conversation_id while a task runs.",
    )
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


class ServerConfig(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="GATEWAY_BOT_", env_nested_delimiter="__", extra="forbid"
    )

    state_dir: Path = Field(default_factory=lambda: _default_state_dir())
    state: StateSettings = Field(default_factory=StateSettings)
    timezone: str = "UTC"
    repo: RepoSettings
    agent: AgentSettings = Field(default_factory=AgentSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    execution: ExecutionSettings = Field(default_factory=ExecutionSettings)
    secrets: dict[str, str] = Field(
        default_factory=dict, description="Pool that repo configs reference with !secret NAME."
    )
    channels: ChannelsSettings = Field(default_factory=ChannelsSettings)
    access: AccessSettings = Field(default_factory=AccessSettings)
    dashboard: DashboardSettings | None = None
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    ha: HaSettings = Field(default_factory=HaSettings)

    _yaml_data: ClassVar[dict[str, Any]] = {}

    @model_validator(mode="after")
    def _operators_may_decide(self) -> ServerConfig:
        # Without this an operator who is no owner passed check and every dashboard Allow /
        # Deny was then refused; say so where the mistake is.
        dashboard = self.dashboard
        for channel, identity in dashboard.operator.items() if dashboard else ():
            if not self.access.may_decide(channel, identity):
                raise ValueError(
                    f"dashboard.operator.{channel}: {identity!r} is not an owner or admin of "
                    f"{channel} (add it to access.owners.{channel} or access.admins.{channel})"
                )
        return self

    @field_validator("state_dir", mode="before")
    @classmethod
    def _state_dir_given(cls, value: object) -> object:
        # Path("") is ".": an empty value silently meant the config file's own directory.
        if isinstance(value, str) and not value.strip():
            raise ValueError(
                "is empty: name a directory (relative to this config file, or absolute), "
                "e.g. state_dir: state, or leave state_dir out for "
                "$XDG_STATE_HOME/gateway-bot (~/.local/state/gateway-bot)"
            )
        return value

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        # Every prompt shows the time in this zone: an unknown one would fail every task.
        return known_zone(value) or value

    @property
    def state_target(self) -> Path | str:
        """Where the state database is: ``state.url``, else ``<state_dir>/state.db``."""
        return self.state.url or self.state_dir / "state.db"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Environment beats YAML; explicit init arguments beat both."""
        return init_settings, env_settings, _YamlSource(settings_cls, cls._yaml_data)


class _YamlSource(PydanticBaseSettingsSource):
    def __init__(self, settings_cls: type[BaseSettings], data: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self._data = data

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)


def _default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gateway-bot"


def environment_with_dotenv(config_dir: Path) -> dict[str, str]:
    """The process environment over the ``.env`` file beside the config (env wins)."""
    path = config_dir / ".env"
    try:
        values = dotenv_values(path)
    except (OSError, UnicodeDecodeError) as exc:  # not UTF-8, unreadable: name the file
        raise ConfigError(str(path), [f"cannot read: {exc}"]) from exc
    merged = {key: value for key, value in values.items() if value is not None}
    merged.update(os.environ)
    return merged


def load_server_config(path: Path) -> ServerConfig:
    """Read and validate the config at ``path``; raise ConfigError listing every problem."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(source, [f"cannot read: {exc.strerror}"]) from exc
    environ = environment_with_dotenv(path.parent)
    data = load_server_yaml(text, source, environ)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(source, ["the top level must be a mapping of keys to values"])
    _default_repo_to_current(data)
    config = build_server_config(data, source)
    if not config.state_dir.is_absolute():
        config.state_dir = (path.parent / config.state_dir).resolve()
    if _is_relative_path(config.repo.url):
        # Like state_dir: relative to the config, not to wherever the daemon was started.
        config.repo.url = str((path.parent / config.repo.url).resolve())
    image = config.sandbox.image
    if image.containerfile is not None and not image.containerfile.is_absolute():
        image.containerfile = (path.parent / image.containerfile).resolve()
    if (dashboard := config.dashboard) is not None:
        if dashboard.tls_certificate and not dashboard.tls_certificate.is_absolute():
            dashboard.tls_certificate = (path.parent / dashboard.tls_certificate).resolve()
        if dashboard.tls_key and not dashboard.tls_key.is_absolute():
            dashboard.tls_key = (path.parent / dashboard.tls_key).resolve()
    return config


def _is_relative_path(url: str) -> bool:
    """A relative local path, not a URL (``scheme://``) nor git's ``host:path``."""
    head = url.split("/", 1)[0]
    return bool(url) and "://" not in url and ":" not in head and not url.startswith(("/", "~"))


def _default_repo_to_current(data: dict[str, Any]) -> None:
    """``repo.url`` left out: the git repo of the current directory, the rule `gateway-bot
    chat` follows, so the sample config checks as it is from a checkout. Outside a repo
    the key stays missing and is reported; GATEWAY_BOT_REPO__URL still beats it."""
    repo = data.get("repo")
    if repo is not None and (not isinstance(repo, dict) or repo.get("url") is not None):
        return
    found = current_git_repo()
    if found is not None:
        data["repo"] = {**(repo or {}), "url": str(found)}
    elif "repo" in data and repo is None:
        data["repo"] = {}  # `repo:` with only comments under it: report repo.url


def current_git_repo() -> Path | None:
    """The top of the git work tree the current directory is in, if any."""
    found = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=False
    )
    return Path(found.stdout.strip()) if found.returncode == 0 else None


def build_server_config(data: dict[str, Any], source: str) -> ServerConfig:
    ServerConfig._yaml_data = data
    try:
        return ServerConfig()  # type: ignore[call-arg]  # values come from the sources
    except ValidationError as exc:
        raise ConfigError(source, describe_validation_errors(exc, ServerConfig)) from exc
    finally:
        ServerConfig._yaml_data = {}
