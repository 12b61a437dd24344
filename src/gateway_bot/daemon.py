"""The composition root: builds the store, sandbox, runner, executor and service from a
config and runs them until a signal (or, for ``chat``, the end of input)."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import shutil
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from gateway_bot.agents.backend import AgentBackend
from gateway_bot.agents.base import WarmRunner, WarmSettings
from gateway_bot.agents.registry import backend_named
from gateway_bot.config.server import ServerConfig, environment_with_dotenv
from gateway_bot.core.application import Application, DaemonLiveState
from gateway_bot.core.channel import ChannelAdapter
from gateway_bot.core.executor import AgentDefaults, TaskExecutor
from gateway_bot.core.feed import ChangeFeed
from gateway_bot.core.service import GatewayService
from gateway_bot.core.status_snapshot import SnapshotWriter, snapshot_path
from gateway_bot.core.workspace_diff import WorkspaceReports
from gateway_bot.core.workspaces import Workspaces
from gateway_bot.dashboard.server import DashboardServer
from gateway_bot.domain.lifecycle import TaskState
from gateway_bot.sandbox.base import Sandbox
from gateway_bot.sandbox.factory import create_sandbox
from gateway_bot.sandbox.podman.sandbox import PodmanSandbox
from gateway_bot.state.database import Database
from gateway_bot.state.schedules_store import SqliteSchedules
from gateway_bot.state.sqlite_store import SqliteStore

log = logging.getLogger(__name__)

PRUNE_INTERVAL_S = 86400.0
"""Retention runs at start, then daily."""


@dataclass(frozen=True)
class SetupProblem:
    message: str


def agent_backend(config: ServerConfig) -> AgentBackend:
    """The descriptor of ``agent.backend``: everything backend-specific comes from it."""
    return backend_named(config.agent.backend)


def agent_environment(config: ServerConfig, config_dir: Path | None) -> dict[str, str]:
    """The backend's model variables from the environment (over ``.env``), then
    ``agent.env``: the agent never inherits the whole environment."""
    environ = environment_with_dotenv(config_dir) if config_dir else dict(os.environ)
    names = agent_backend(config).env_names
    env = {name: environ[name] for name in names if environ.get(name)}
    env.update(config.agent.env)
    return env


def agent_command(config: ServerConfig) -> list[str]:
    """``agent.command`` as configured, or the backend's own."""
    return list(config.agent.command or agent_backend(config).default_command)


def resolve_agent_command(config: ServerConfig) -> list[str]:
    """The agent command with its program found on this host (PATH first, else where
    set-up pins the backend's CLI); other names and paths are left as they are."""
    return agent_backend(config).locate_command(agent_command(config))


def _runner_command(config: ServerConfig) -> list[str]:
    """In a container the command runs as named (the image has the agent on its PATH);
    on the host it is resolved like ``check`` resolves it."""
    if config.sandbox.kind == "none":
        return resolve_agent_command(config)
    return agent_command(config)


def _warm_runner(
    backend: AgentBackend, config: ServerConfig, sandbox: Sandbox
) -> WarmRunner | None:
    """Warm sessions end with their container's idle stop (a podman sandbox asks the runner
    which are idle); on the host, after the same idle time."""
    if backend.make_warm_runner is None or config.agent.max_warm_sessions == 0:
        return None
    keeps = isinstance(sandbox, PodmanSandbox)
    settings = WarmSettings(
        max_sessions=config.agent.max_warm_sessions,
        idle_s=None if keeps else config.sandbox.idle_stop_minutes * 60,
    )
    runner = backend.make_warm_runner(_runner_command(config), settings)
    if isinstance(sandbox, PodmanSandbox):
        sandbox.kept_processes = runner
    return runner


def agent_program(config: ServerConfig) -> str | None:
    """The agent binary that will run (absolute), or None when there is none."""
    return shutil.which(resolve_agent_command(config)[0])


def check_agent_setup(config: ServerConfig, agent_env: Mapping[str, str]) -> SetupProblem | None:
    """Catch the set-up mistakes that would otherwise fail deep inside the agent."""
    backend = agent_backend(config)
    if agent_program(config) is None:
        return SetupProblem(
            f"The agent command {agent_command(config)[0]!r} was not found: {backend.install_hint}."
        )
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
    """The backend's files for the sandbox image's build context: the container runs the
    same pinned agent as the host. None when the program is missing (``check`` says so)."""
    found = agent_program(config)
    return agent_backend(config).image_files(Path(found)) if found else {}


class Daemon:
    def __init__(
        self,
        config: ServerConfig,
        adapters: Mapping[str, ChannelAdapter],
        agent_env: Mapping[str, str],
        database: Database | None = None,
    ) -> None:
        """``database``: the state database the channels' stores were built on (cli.py
        makes it before the adapters); the store opens it and every owner migrates in it."""
        self.config = config
        self.database = database if database is not None else Database()
        self.backend = agent_backend(config)
        self.agent_env = dict(agent_env)
        """The agent's model variables. The executor reads this same dict: ``open`` points
        a loopback model API URL (``backend.base_url_env``) at the address the sandbox
        gives for it."""
        self.store = SqliteStore(config.state_dir / "state.db", self.database)
        self.sandbox = create_sandbox(config.sandbox, config.state_dir, agent_image_files(config))
        self.workspaces = Workspaces(config.state_dir, config.repo.url, config.repo.default_branch)
        self.workspace_reports = WorkspaceReports(self.workspaces, self.sandbox)
        self._garbage_collector: asyncio.Task[None] | None = None
        self._pruner: asyncio.Task[None] | None = None
        self.warm_runner = _warm_runner(self.backend, config, self.sandbox)
        """Keeps each active conversation's agent process between turns; None: every turn
        starts the agent afresh."""
        executor = TaskExecutor(
            self.store,
            self.workspaces,
            self.sandbox,
            self.backend,
            self.warm_runner or self.backend.make_runner(_runner_command(config)),
            AgentDefaults(
                model=config.agent.model,
                timeout_s=config.agent.timeout_seconds,
                stall_s=config.agent.stall_seconds,
                env=self.agent_env,
                timezone=config.timezone,
                secrets=config.secrets,
            ),
            config.execution,
        )
        self.service = GatewayService(
            self.store,
            adapters,
            executor,
            access=config.access,
            timezone=config.timezone,
            max_concurrent_tasks=config.execution.max_concurrent_tasks,
            max_pending_per_conversation=config.execution.max_pending_per_conversation,
            workspace_reports=self.workspace_reports,
            schedules=SqliteSchedules(self.database),
        )
        self.feed = ChangeFeed()
        """Every task state change, for in-process subscribers (the dashboard, next)."""
        self.store.on_transition(self.feed.publish_transition)
        live = DaemonLiveState(adapters, self.sandbox)
        self.application = Application(
            self.store,
            live,
            service=self.service,
            conversation_root=lambda conversation_id: self.workspaces.dirs(conversation_id).root,
            parse_line=self.backend.parse_stream_line,
        )
        self.status_snapshot = SnapshotWriter(
            snapshot_path(config.state_dir), live, self.sandbox.name
        )
        dashboard = config.dashboard
        self.dashboard = (
            DashboardServer(self.application, self.feed, dashboard, config.state_dir)
            if dashboard is not None and dashboard.enabled
            else None
        )
        self.stop_requested = asyncio.Event()
        self.end_of_input = asyncio.Event()

    async def open(self) -> None:
        """Raises SandboxUnavailable (one clear message) when the sandbox cannot run."""
        await self.store.open()
        await self.sandbox.check()
        await self.sandbox.open(self._conversation_exists)
        if (local_api := model_api_on_loopback(self.backend, self.agent_env)) is not None:
            reached = await self.sandbox.reach_host_loopback(local_api)
            self.agent_env[self.backend.base_url_env] = reached

    async def _conversation_exists(self, conversation_id: str) -> bool:
        try:
            await self.store.get_conversation(conversation_id)
        except KeyError:
            return False
        return True

    async def collect_garbage(self) -> None:
        """Conversations idle for ``sandbox.gc_after_days`` lose their container and their
        directories; their record stays, so a later message starts a fresh session there."""
        idle_s = self.config.sandbox.gc_after_days * 86400
        for conversation_id in await self.workspaces.idle_conversations(idle_s):
            if not await self._conversation_exists(conversation_id):
                continue
            busy = await self.store.conversation_tasks(
                conversation_id, [TaskState.PENDING, TaskState.EXECUTING]
            )
            if busy:
                continue
            log.info("garbage-collecting idle conversation %s", conversation_id)
            try:
                await self.sandbox.discard(conversation_id)
                await self.workspaces.remove(conversation_id)
            except Exception:  # one conversation's trouble must not stop the others'
                log.exception("garbage-collecting conversation %s failed", conversation_id)
                continue
            await self.store.update_conversation(conversation_id, clear_session=True)

    async def _collect_garbage_forever(self) -> None:
        interval = min(3600.0, max(1.0, self.config.sandbox.gc_after_days * 86400 / 4))
        while True:
            try:
                await self.collect_garbage()
            except Exception:
                log.exception("garbage collection failed; trying again later")
            await asyncio.sleep(interval)

    async def prune_old_state(self) -> dict[str, int]:
        """Retention: every owner of state (the core, each channel) drops what it keeps
        only for ``state.retention_days`` (``Database.add_pruner``)."""
        before = time.time() - self.config.state.retention_days * 86400
        touched = await self.database.prune(before)
        if any(touched.values()):
            log.info(
                "pruned state older than %s days: %s", self.config.state.retention_days, touched
            )
        return touched

    async def _prune_forever(self) -> None:
        while True:
            try:
                await self.prune_old_state()
            except Exception:
                log.exception("pruning old state failed; trying again tomorrow")
            await asyncio.sleep(PRUNE_INTERVAL_S)

    async def _start_dashboard(self) -> None:
        """A dashboard that cannot listen (port taken, unreadable certificate) is logged
        loudly and the daemon serves its channels without it: chat must not go down for
        the operators' view of it."""
        if self.dashboard is None:
            return
        try:
            await self.dashboard.start()
        except (OSError, ValueError) as exc:
            log.error("the dashboard is not served: %s", exc)

    async def run(self) -> None:
        """Serve until SIGTERM/SIGINT or end of input; then shut down gracefully.

        End of input (console) waits for every queued task to finish; a signal waits at most
        ``execution.shutdown_timeout_seconds`` and leaves the rest for the next start.
        """
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop_requested.set)
        try:
            await self.service.start()
            self.status_snapshot.start()
            await self._start_dashboard()
            self._garbage_collector = asyncio.create_task(self._collect_garbage_forever())
            self._pruner = asyncio.create_task(self._prune_forever())
            stop = asyncio.create_task(self.stop_requested.wait())
            eof = asyncio.create_task(self.end_of_input.wait())
            await asyncio.wait({stop, eof}, return_when=asyncio.FIRST_COMPLETED)
            if eof.done() and not stop.done():
                await self.service.stop_listening()
                drained = asyncio.create_task(self.service.wait_idle(None))
                await asyncio.wait({drained, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            eof.cancel()
            log.info("shutting down")
            await self.service.shutdown(self.config.execution.shutdown_timeout_seconds)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            if self._garbage_collector is not None:
                self._garbage_collector.cancel()
            if self._pruner is not None:
                self._pruner.cancel()
                await asyncio.gather(self._pruner, return_exceptions=True)
            await self.status_snapshot.stop()
            if self.dashboard is not None:
                await self.dashboard.stop()
            self.feed.close()
            if self.warm_runner is not None:
                await self.warm_runner.close()
            await self.sandbox.close()
            await self.store.close()
