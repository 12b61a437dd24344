"""The composition root: builds the store, sandbox, runner, executor and service from a
config and runs them until a signal (or, for ``chat``, the end of input)."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import shutil
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from gateway_bot.agents.claude_code import ClaudeCodeRunner
from gateway_bot.config.server import ServerConfig, environment_with_dotenv
from gateway_bot.core.channel import ChannelAdapter
from gateway_bot.core.executor import AgentDefaults, TaskExecutor
from gateway_bot.core.service import GatewayService
from gateway_bot.core.workspace_diff import WorkspaceReports
from gateway_bot.core.workspaces import Workspaces
from gateway_bot.domain.lifecycle import TaskState
from gateway_bot.sandbox.factory import create_sandbox
from gateway_bot.state.sqlite_store import SqliteStore

log = logging.getLogger(__name__)

MODEL_ENV = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "CLAUDE_CODE_MAX_RETRIES",
)
"""Model-endpoint variables the agent inherits from the daemon's environment (or .env)."""

_CREDENTIALS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")

SETUP_TOOLS_BIN = Path(__file__).resolve().parents[2] / ".tools" / "node_modules" / ".bin"
"""Where scripts/setup.sh installs the pinned Claude Code CLI: the checkout this package
runs from (uv installs the project editable, so this file lives in its src/)."""


@dataclass(frozen=True)
class SetupProblem:
    message: str


def agent_environment(config: ServerConfig, config_dir: Path | None) -> dict[str, str]:
    environ = environment_with_dotenv(config_dir) if config_dir else dict(os.environ)
    env = {name: environ[name] for name in MODEL_ENV if environ.get(name)}
    env.update(config.agent.env)
    return env


def resolve_agent_command(command: Sequence[str]) -> list[str]:
    """``agent.command`` with its program found: a ``claude`` that is not on PATH is the
    one set-up pinned in the checkout's .tools/, so the default works in a shell whose
    PATH lacks it (the ``gateway-bot`` launcher's). PATH wins: an operator's own install
    is never second-guessed; paths and other names are left as they are."""
    program = command[0]
    if program != "claude" or shutil.which(program) is not None:
        return list(command)
    pinned = SETUP_TOOLS_BIN / program
    if os.access(pinned, os.X_OK):
        return [str(pinned), *command[1:]]
    return list(command)


def _runner_command(config: ServerConfig) -> list[str]:
    """In a container the command runs as named (the image has ``claude`` on its PATH);
    on the host it is resolved like ``check`` resolves it."""
    if config.sandbox.kind == "none":
        return resolve_agent_command(config.agent.command)
    return list(config.agent.command)


def agent_program(config: ServerConfig) -> str | None:
    """The agent binary that will run (absolute), or None when there is none."""
    return shutil.which(resolve_agent_command(config.agent.command)[0])


def check_agent_setup(config: ServerConfig, agent_env: Mapping[str, str]) -> SetupProblem | None:
    """Catch the two set-up mistakes that would otherwise fail deep inside the agent."""
    if agent_program(config) is None:
        return SetupProblem(
            f"The agent command {config.agent.command[0]!r} was not found: run "
            "`bash scripts/setup.sh` (it installs the pinned Claude Code under .tools/), "
            "install it yourself (npm install -g @anthropic-ai/claude-code), "
            "or set agent.command in the config."
        )
    if not any(agent_env.get(name) for name in _CREDENTIALS):
        return SetupProblem(
            "No model credentials: set ANTHROPIC_API_KEY (or CLAUDE_CODE_OAUTH_TOKEN; for another "
            "Anthropic-compatible endpoint also ANTHROPIC_BASE_URL) in the environment, in .env, "
            "or under agent.env in the config."
        )
    loopback = model_api_on_loopback(agent_env)
    if config.sandbox.kind == "podman" and loopback and urlsplit(loopback).scheme != "http":
        return SetupProblem(
            f"ANTHROPIC_BASE_URL {loopback} is on this host's loopback, which the sandbox "
            "reaches through a relay to that port: use http:// there (a certificate for "
            "localhost cannot name the relay's address)."
        )
    return None


def model_api_on_loopback(agent_env: Mapping[str, str]) -> str | None:
    """ANTHROPIC_BASE_URL when it names this host's loopback (a local model gateway)."""
    base_url = agent_env.get("ANTHROPIC_BASE_URL", "")
    host = urlsplit(base_url).hostname or ""
    return base_url if host == "localhost" or _is_loopback(host) else None


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def agent_image_files(config: ServerConfig) -> dict[str, Path]:
    """The agent's binary for the sandbox image's build context: the container runs the
    same pinned Claude Code as the host (the default Containerfile copies ``claude``)."""
    found = agent_program(config)
    return {"claude": Path(found).resolve()} if found else {}


class Daemon:
    def __init__(
        self,
        config: ServerConfig,
        adapters: Mapping[str, ChannelAdapter],
        agent_env: Mapping[str, str],
    ) -> None:
        self.config = config
        self.agent_env = dict(agent_env)
        """The agent's model variables. The executor reads this same dict: ``open`` points
        a loopback ANTHROPIC_BASE_URL at the address the sandbox gives for it."""
        self.store = SqliteStore(config.state_dir / "state.db")
        self.sandbox = create_sandbox(config.sandbox, config.state_dir, agent_image_files(config))
        self.workspaces = Workspaces(config.state_dir, config.repo.url, config.repo.default_branch)
        self.workspace_reports = WorkspaceReports(self.workspaces, self.sandbox)
        self._garbage_collector: asyncio.Task[None] | None = None
        executor = TaskExecutor(
            self.store,
            self.workspaces,
            self.sandbox,
            ClaudeCodeRunner(_runner_command(config)),
            AgentDefaults(
                model=config.agent.model,
                timeout_s=config.agent.timeout_seconds,
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
        )
        self.stop_requested = asyncio.Event()
        self.end_of_input = asyncio.Event()

    async def open(self) -> None:
        """Raises SandboxUnavailable (one clear message) when the sandbox cannot run."""
        await self.store.open()
        await self.sandbox.check()
        await self.sandbox.open(self._conversation_exists)
        if (local_api := model_api_on_loopback(self.agent_env)) is not None:
            reached = await self.sandbox.reach_host_loopback(local_api)
            self.agent_env["ANTHROPIC_BASE_URL"] = reached

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
            self._garbage_collector = asyncio.create_task(self._collect_garbage_forever())
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
            await self.sandbox.close()
            await self.store.close()
