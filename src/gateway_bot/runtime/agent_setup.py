"""Which agent CLIs a deployment runs and how each is started: the backends a config
enables, their commands, the environment they inherit, the files their image needs, what
`check` says about them, and the runners (the default one warm when configured).

Composition-level, like ``daemon``: read by the daemon, the CLI's ``check`` and the
sandbox canary; it knows the server config and the agents, nothing of chat."""

from __future__ import annotations

import ipaddress
import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from gateway_bot.agents.backend import AgentBackend
from gateway_bot.agents.base import AgentRunner, WarmRunner, WarmSettings
from gateway_bot.agents.enabled import AgentSet, EnabledAgent
from gateway_bot.agents.registry import backend_named, canonical_name
from gateway_bot.config.server import ServerConfig, environment_with_dotenv
from gateway_bot.sandbox.base import KeepsProcesses, Sandbox

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SetupProblem:
    message: str


def agent_backend(config: ServerConfig) -> AgentBackend:
    """The descriptor of ``agent.backend``: everything backend-specific comes from it."""
    return backend_named(config.agent.backend)


def enabled_backends(config: ServerConfig) -> dict[str, AgentBackend]:
    """``agent.backend`` first, then ``agent.enabled``: the agent CLIs this server offers."""
    names = [canonical_name(config.agent.backend)]
    names += [n for n in map(canonical_name, config.agent.enabled) if n not in names]
    return {name: backend_named(name) for name in names}


def agent_environment(config: ServerConfig, config_dir: Path | None) -> dict[str, str]:
    """The enabled backends' model variables from the environment (over ``.env``), then
    ``agent.env``: the agent never inherits the whole environment (and each CLI gets only
    its own backend's, ``AgentSet.env_for``)."""
    environ = environment_with_dotenv(config_dir) if config_dir else dict(os.environ)
    names = [n for backend in enabled_backends(config).values() for n in backend.env_names]
    env = {name: environ[name] for name in names if environ.get(name)}
    env.update(config.agent.env)
    return env


def _own_settings(config: ServerConfig, name: str) -> tuple[list[str] | None, str | None]:
    """(command, model) configured for backend ``name``: ``agent.backends.NAME``, else
    for the default backend ``agent.command`` / ``agent.model``."""
    own = next((s for key, s in config.agent.backends.items() if canonical_name(key) == name), None)
    command = own.command if own and own.command else None
    model = own.model if own and own.model else None
    if name == canonical_name(config.agent.backend):
        command = command or config.agent.command
        model = model or config.agent.model
    return command, model


def agent_command(config: ServerConfig, name: str | None = None) -> list[str]:
    """The backend's configured command, or its own default (the default backend's when
    ``name`` is None)."""
    backend = backend_named(name) if name else agent_backend(config)
    command, _ = _own_settings(config, backend.name)
    return list(command or backend.default_command)


def resolve_agent_command(config: ServerConfig, name: str | None = None) -> list[str]:
    """The agent command with its program found on this host (PATH first, else where
    set-up pins the backend's CLI); other names and paths are left as they are."""
    backend = backend_named(name) if name else agent_backend(config)
    return backend.locate_command(agent_command(config, backend.name))


def _runner_command(config: ServerConfig, name: str | None = None) -> list[str]:
    """In a container the command runs as named (the image has the agent on its PATH);
    on the host it is resolved like ``check`` resolves it."""
    if config.sandbox.kind == "none":
        return resolve_agent_command(config, name)
    return agent_command(config, name)


def _warm_runner(
    backend: AgentBackend, config: ServerConfig, sandbox: Sandbox
) -> WarmRunner | None:
    """Warm sessions end with their container's idle stop (a podman sandbox asks the runner
    which are idle); on the host, after the same idle time."""
    if backend.make_warm_runner is None or config.agent.max_warm_sessions == 0 or config.ha.enabled:
        return None
    keeps = isinstance(sandbox, KeepsProcesses)
    settings = WarmSettings(
        max_sessions=config.agent.max_warm_sessions,
        idle_s=None if keeps else config.sandbox.idle_stop_minutes * 60,
    )
    runner = backend.make_warm_runner(_runner_command(config), settings)
    if isinstance(sandbox, KeepsProcesses):
        sandbox.kept_processes = runner
    return runner


def agent_program(config: ServerConfig, name: str | None = None) -> str | None:
    """The agent binary that will run (absolute), or None when there is none."""
    return shutil.which(resolve_agent_command(config, name)[0])


def check_agent_setup(config: ServerConfig, agent_env: Mapping[str, str]) -> SetupProblem | None:
    """Catch the set-up mistakes that would otherwise fail deep inside an agent: every
    enabled backend must be able to run (a user may choose any of them)."""
    for name in enabled_backends(config):
        if (problem := _check_backend(config, name, agent_env)) is not None:
            return problem
    return None


def _check_backend(
    config: ServerConfig, name: str, agent_env: Mapping[str, str]
) -> SetupProblem | None:
    backend = backend_named(name)
    if agent_program(config, name) is None:
        command = agent_command(config, name)[0]
        return SetupProblem(f"The agent command {command!r} was not found: {backend.install_hint}.")
    if (missing := backend.credentials_problem(agent_env)) is not None:
        return SetupProblem(missing)
    try:
        backend.model_api_rules(agent_env)
    except ValueError as exc:
        return SetupProblem(f"{backend.base_url_env}: {exc}: give the model API's URL.")
    loopback = model_api_on_loopback(backend, agent_env)
    if config.sandbox.kind == "podman" and loopback and urlsplit(loopback).scheme != "http":
        return SetupProblem(
            f"{backend.base_url_env} {loopback} is on this host's loopback, which the sandbox "
            "reaches through a relay to that port: use http:// there (a certificate for "
            "localhost cannot name the relay's address)."
        )
    return None


def model_api_on_loopback(backend: AgentBackend, agent_env: Mapping[str, str]) -> str | None:
    """The model API's base URL when it names this host's loopback (a local gateway)."""
    base_url = agent_env.get(backend.base_url_env, "")
    host = urlsplit(base_url).hostname or ""
    return base_url if host == "localhost" or _is_loopback(host) else None


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def agent_image_files(config: ServerConfig) -> dict[str, Path]:
    """The enabled backends' files for the sandbox image's build context: the container
    runs the same pinned agents as the host, and only the enabled ones. A missing program
    adds nothing (``check`` says so)."""
    files: dict[str, Path] = {}
    for name, backend in enabled_backends(config).items():
        if found := agent_program(config, name):
            files.update(backend.image_files(Path(found)))
    return files


def describe_backends(config: ServerConfig) -> list[str]:
    """``check``'s lines on the backends beyond the default one, and one line per enabled
    backend on what its CLI cannot do here."""
    lines = []
    default = canonical_name(config.agent.backend)
    for name, backend in enabled_backends(config).items():
        if name != default:
            found = agent_program(config, name)
            lines.append(
                f"agent {name}: {found or agent_command(config, name)[0] + ' (not found)'}"
            )
        if backend.limitations:
            lines.append(f"note: {name} cannot: {'; '.join(backend.limitations)}")
        if config.agent.approvals is not None:
            lines.append(approvals_line(name, backend.asks_tool_calls))
    return lines


def approvals_line(name: str, asks: bool) -> str:
    """What action approvals can do with this CLI (decision 0087)."""
    if asks:
        return (
            f"approvals: {name} asks before tool calls (each rule: allow, ask or deny; "
            "AskUserQuestion becomes a card)"
        )
    return (
        f"approvals: {name} cannot ask before tool calls (its headless run has no permission "
        "prompt to route): its tool calls run unasked; only the egress proxy's rules can "
        "hold its network writes"
    )


def agent_set(config: ServerConfig, sandbox: Sandbox) -> tuple[AgentSet, WarmRunner | None]:
    """Each enabled backend with its runner (the default one warm when configured)."""
    default = canonical_name(config.agent.backend)
    agents: dict[str, EnabledAgent] = {}
    warm: WarmRunner | None = None
    for name, backend in enabled_backends(config).items():
        _, model = _own_settings(config, name)
        runner: AgentRunner | None = None
        if name == default:
            runner = warm = _warm_runner(backend, config, sandbox)
        runner = runner or backend.make_runner(_runner_command(config, name))
        agents[name] = EnabledAgent(backend, runner, model)
    return AgentSet(default, agents), warm
