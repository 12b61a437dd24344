"""The composition root: builds the store, sandbox, runner, executor and service from a
config and runs them until a signal (or, for ``chat``, the end of input)."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import shutil
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from gateway_bot.agents.claude_code import ClaudeCodeRunner
from gateway_bot.config.server import ServerConfig, environment_with_dotenv
from gateway_bot.core.channel import ChannelAdapter
from gateway_bot.core.executor import AgentDefaults, TaskExecutor
from gateway_bot.core.lifecycle import TaskState
from gateway_bot.core.service import GatewayService
from gateway_bot.core.workspaces import Workspaces
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


@dataclass(frozen=True)
class SetupProblem:
    message: str


def agent_environment(config: ServerConfig, config_dir: Path | None) -> dict[str, str]:
    environ = environment_with_dotenv(config_dir) if config_dir else dict(os.environ)
    env = {name: environ[name] for name in MODEL_ENV if environ.get(name)}
    env.update(config.agent.env)
    return env


def check_agent_setup(config: ServerConfig, agent_env: Mapping[str, str]) -> SetupProblem | None:
    """Catch the two set-up mistakes that would otherwise fail deep inside the agent."""
    if shutil.which(config.agent.command[0]) is None:
        return SetupProblem(
            f"The agent command {config.agent.command[0]!r} was not found: install Claude Code "
            "(npm install -g @anthropic-ai/claude-code) or set agent.command in the config."
        )
    if not any(agent_env.get(name) for name in _CREDENTIALS):
        return SetupProblem(
            "No model credentials: set ANTHROPIC_API_KEY (or CLAUDE_CODE_OAUTH_TOKEN; for another "
            "Anthropic-compatible endpoint also ANTHROPIC_BASE_URL) in the environment, in .env, "
            "or under agent.env in the config."
        )
    base_url = agent_env.get("ANTHROPIC_BASE_URL", "")
    host = urlsplit(base_url).hostname or ""
    if config.sandbox.kind == "podman" and (host == "localhost" or _is_loopback(host)):
        return SetupProblem(
            f"ANTHROPIC_BASE_URL {base_url} is this host's loopback, which the sandboxed agent "
            "cannot reach: use an address the egress proxy can reach (sandbox.egress_network), "
            "or sandbox: {kind: none} for a local endpoint."
        )
    return None


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def agent_image_files(config: ServerConfig) -> dict[str, Path]:
    """The agent's binary for the sandbox image's build context: the container runs the
    same pinned Claude Code as the host (the default Containerfile copies ``claude``)."""
    found = shutil.which(config.agent.command[0])
    return {"claude": Path(found).resolve()} if found else {}


class Daemon:
    def __init__(
        self,
        config: ServerConfig,
        adapters: Mapping[str, ChannelAdapter],
        agent_env: Mapping[str, str],
    ) -> None:
        self.config = config
        self.store = SqliteStore(config.state_dir / "state.db")
        self.sandbox = create_sandbox(config.sandbox, config.state_dir, agent_image_files(config))
        self.workspaces = Workspaces(config.state_dir, config.repo.url, config.repo.default_branch)
        self._garbage_collector: asyncio.Task[None] | None = None
        executor = TaskExecutor(
            self.store,
            self.workspaces,
            self.sandbox,
            ClaudeCodeRunner(config.agent.command),
            AgentDefaults(
                model=config.agent.model,
                timeout_s=config.agent.timeout_seconds,
                env=dict(agent_env),
                timezone=config.timezone,
                secrets=config.secrets,
            ),
        )
        self.service = GatewayService(
            self.store,
            adapters,
            executor,
            access=config.access,
            timezone=config.timezone,
            max_concurrent_tasks=config.execution.max_concurrent_tasks,
            max_pending_per_conversation=config.execution.max_pending_per_conversation,
        )
        self.stop_requested = asyncio.Event()
        self.end_of_input = asyncio.Event()

    async def open(self) -> None:
        """Raises SandboxUnavailable (one clear message) when the sandbox cannot run."""
        await self.store.open()
        await self.sandbox.check()
        await self.sandbox.open(self._conversation_exists)

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
            await self.sandbox.discard(conversation_id)
            await self.workspaces.remove(conversation_id)
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
