"""The composition root: builds the store, sandbox, runner, executor and service from a
config and runs them until a signal (or, for ``chat``, the end of input)."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gateway_bot.agents.registry import parse_any_line
from gateway_bot.config.server import ServerConfig
from gateway_bot.core.actions.approvals import WaitingListener
from gateway_bot.core.actions.network import network_asker
from gateway_bot.core.application import Application
from gateway_bot.core.channel import ChannelAdapter
from gateway_bot.core.conversations.executor import AgentDefaults, TaskExecutor
from gateway_bot.core.fault_points import check_fault_point
from gateway_bot.core.feed import ChangeFeed
from gateway_bot.core.live_state import DaemonLiveState
from gateway_bot.core.replicas.duties import Replicas
from gateway_bot.core.schedules.test_clock import schedule_test_clock
from gateway_bot.core.service import GatewayService
from gateway_bot.core.status.snapshot import SnapshotWriter, snapshot_path
from gateway_bot.core.workspaces.directories import Workspaces
from gateway_bot.core.workspaces.reports import WorkspaceReports
from gateway_bot.domain.lifecycle import TaskState
from gateway_bot.runtime.agent_setup import (
    agent_backend,
    agent_image_files,
    agent_set,
    model_api_on_loopback,
)
from gateway_bot.runtime.control_socket import ControlServer
from gateway_bot.sandbox.base import HoldsEgress
from gateway_bot.sandbox.factory import create_sandbox
from gateway_bot.state.action_approvals_store import SqlActionApprovals
from gateway_bot.state.database import Database
from gateway_bot.state.leases_store import LeaseStore
from gateway_bot.state.schedules_store import SqlSchedules
from gateway_bot.state.sql_store import SqlStore

if TYPE_CHECKING:
    from gateway_bot.dashboard.server import DashboardServer

log = logging.getLogger(__name__)

PRUNE_INTERVAL_S = 86400.0
"""Retention runs at start, then daily."""


class Daemon:
    def __init__(
        self,
        config: ServerConfig,
        adapters: Mapping[str, ChannelAdapter],
        agent_env: Mapping[str, str],
        database: Database | None = None,
    ) -> None:
        """``database``: the state database the channels' stores were built on (cli/
        makes it before the adapters); the store opens it and every owner migrates in it."""
        check_fault_point(os.environ)  # tests only: a typo'd point fails here, loudly
        self.config = config
        self.database = (
            database if database is not None else Database(pool_size=config.state.pool_size)
        )
        self.backend = agent_backend(config)
        self.agent_env = dict(agent_env)
        """The agent's model variables. The executor reads this same dict: ``open`` points
        a loopback model API URL (``backend.base_url_env``) at the address the sandbox
        gives for it."""
        self.store = SqlStore(config.state_target, self.database)
        self.sandbox = create_sandbox(config.sandbox, config.state_dir, agent_image_files(config))
        self.workspaces = Workspaces(config.state_dir, config.repo.url, config.repo.default_branch)
        self.workspace_reports = WorkspaceReports(self.workspaces, self.sandbox)
        self._garbage_collector: asyncio.Task[None] | None = None
        self._pruner: asyncio.Task[None] | None = None
        self.agents, self.warm_runner = agent_set(config, self.sandbox)
        """``warm_runner`` keeps each active conversation's agent process between turns
        (the default backend's, when it can); None: every turn starts the agent afresh."""
        executor = TaskExecutor(
            self.store,
            self.workspaces,
            self.sandbox,
            self.agents,
            AgentDefaults(
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
            schedules=SqlSchedules(self.database),
            **_schedule_clock(),
            conversation_link=(
                config.dashboard.conversation_url
                if config.dashboard and config.dashboard.enabled
                else None
            ),
            agent_names=self.agents.names(),
            action_records=(
                SqlActionApprovals(self.database)
                if config.agent.approvals is not None
                or config.agent.budget_usd is not None
                or isinstance(self.sandbox, HoldsEgress)
                else None
            ),
            action_settings=config.agent.approvals,
            files_wait_s=config.execution.files_wait_seconds,
        )
        if self.service.action_approvals is not None:
            executor.action_settings = config.agent.approvals
            executor.ask_action = self.service.action_approvals.ask
            executor.budget_usd = config.agent.budget_usd
            if isinstance(self.sandbox, HoldsEgress):
                # The proxy's held requests (egress ask rules) become the same cards.
                self.sandbox.set_egress_ask(network_asker(self.service.action_approvals))
        self.replicas: Replicas | None = None
        """One of several replicas on the shared database (``ha.enabled``); the console is
        per process, every other channel's listener runs under a lease."""
        if config.ha.enabled:
            self.replicas = Replicas(
                LeaseStore(self.database),
                self.service,
                adapters,
                [name for name in adapters if name != "console"],
                config.ha,
                config.execution.max_concurrent_tasks,
            )
        self.feed = ChangeFeed()
        """Every task state change, for in-process subscribers (the dashboard, next)."""
        self.store.on_transition(self.feed.publish_transition)
        if self.service.action_approvals is not None:
            self.service.action_approvals.on_waiting = self._publish_waiting(
                self.service.action_approvals.on_waiting
            )
        live = DaemonLiveState(adapters, self.sandbox)
        self.application = Application(
            self.store,
            live,
            service=self.service,
            conversation_root=lambda conversation_id: self.workspaces.dirs(conversation_id).root,
            parse_line=parse_any_line,
            context_files=lambda conversation_id: self.sandbox.files(
                self.workspaces.execution_context(conversation_id)
            ),
        )
        self.status_snapshot = SnapshotWriter(
            snapshot_path(config.state_dir), live, self.sandbox.name
        )
        dashboard = config.dashboard
        self.dashboard: DashboardServer | None = None
        if dashboard is not None and dashboard.enabled:
            # Only here: aiohttp's web server, jinja2 and prometheus-client cost every start
            # a third of a second, and most deployments run without the dashboard.
            from gateway_bot.dashboard.metrics import TaskDurations
            from gateway_bot.dashboard.server import DashboardServer

            durations = TaskDurations()  # /metrics' histogram: only the dashboard serves it
            self.store.on_transition(durations.observe_transition)
            self.dashboard = DashboardServer(
                self.application, self.feed, dashboard, config.state_dir, self.database, durations
            )
        self.control: ControlServer | None = None
        """``gateway-bot approve|deny`` asks the daemon through it (``run``, not ``chat``:
        set by ``serve_control``)."""
        self.stop_requested = asyncio.Event()
        self.end_of_input = asyncio.Event()

    def _publish_waiting(self, told: WaitingListener | None) -> WaitingListener:
        """A task that starts or stops waiting for a decision keeps its state (executing):
        the feed still hears of it, so a live page shows it waiting, and then not."""

        async def tell(task_id: str, what: str | None) -> None:
            if told is not None:
                await told(task_id, what)
            self.feed.publish_transition(await self.store.get_task(task_id), TaskState.EXECUTING)

        return tell

    async def open(self) -> None:
        """Raises SandboxUnavailable (one clear message) when the sandbox cannot run."""
        # The store's open (the file, its migrations checked) and the sandbox's check (the
        # Podman service's ping and `podman --version`, a process start: 0.1-0.5 s on a
        # loaded machine) wait on different things: both at once (issue 33, a restart's
        # start). Both end before either's failure is raised, the store's first.
        outcomes = await asyncio.gather(
            self.store.open(), self.sandbox.check(), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        await self.sandbox.open(self._conversation_exists)
        for agent in self.agents.agents.values():
            backend = agent.backend
            if (local_api := model_api_on_loopback(backend, self.agent_env)) is not None:
                reached = await self.sandbox.reach_host_loopback(local_api)
                self.agent_env[backend.base_url_env] = reached

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
                context = self.workspaces.execution_context(conversation_id)
                await self.sandbox.files(context).remove()  # the sandbox's files, then ours
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

    def serve_control(self) -> None:
        """Answer ``gateway-bot approve|deny`` once running (``run`` asks for it; ``chat``,
        a console the user already sits at, does not)."""
        replica_id = self.replicas.id if self.replicas is not None else None
        self.control = ControlServer(self.application, self.config.state_dir, replica_id)

    async def _start_control(self) -> None:
        """Without its control socket the daemon still serves chat; only shell decisions
        (``gateway-bot approve``) are unavailable, and the log says why."""
        if self.control is None:
            return
        try:
            await self.control.start()
        except OSError as exc:
            log.error("the control socket is not served (no shell approvals): %s", exc)

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
            if self.replicas is not None:
                await self.replicas.start()
            self.status_snapshot.start()
            await self._start_dashboard()
            await self._start_control()
            self._garbage_collector = asyncio.create_task(self._collect_garbage_forever())
            self._pruner = asyncio.create_task(self._prune_forever())
            # What start-up made lives as long as the daemon: out of the collector's way, a
            # full collection no longer walks it (tens of ms, in a message's path: issue 33's
            # p99). Unfrozen before the collections at exit (``cli/commands/serve.py``).
            gc.freeze()
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
            if self.replicas is not None:
                await self.replicas.stop_listening()
            await self.service.shutdown(self.config.execution.shutdown_timeout_seconds)
            if self.replicas is not None:
                await self.replicas.leave()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            if self._garbage_collector is not None:
                self._garbage_collector.cancel()
            if self._pruner is not None:
                self._pruner.cancel()
                await asyncio.gather(self._pruner, return_exceptions=True)
            if self.control is not None:
                await self.control.stop()
            await self.status_snapshot.stop()
            if self.dashboard is not None:
                await self.dashboard.stop()
            self.feed.close()
            if self.warm_runner is not None:
                await self.warm_runner.close()
            await self.sandbox.close()
            await self.store.close()


def _schedule_clock() -> dict[str, Any]:
    """The schedules' clock and sleep: the real ones, unless a test set its hook
    (``core/schedules/test_clock.py``)."""
    clock = schedule_test_clock(os.environ)
    if clock is None:
        return {}
    return {"schedule_clock": clock.now, "schedule_sleep": clock.sleep}
