"""What the rest of the daemon may ask of a sandbox: run this argv there, stream its output.

The sandbox knows nothing of chat: it sees an opaque execution-context id and a set of host
directories to expose, never a conversation, a channel or a sender. Those directories are
the sandbox's: the rest of the daemon reaches their content only through
``Sandbox.files(context)`` (``context_files.ContextFiles``), never by opening the paths, so a
sandbox whose directories live elsewhere (a volume on a remote host, a Kubernetes claim) fits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from gateway_bot.sandbox.context_files import ContextFiles
from gateway_bot.sandbox.egress.held import EgressAsk
from gateway_bot.sandbox.egress.rules import EgressRule

REPO_CONTAINERFILE_PATH = ".gateway/Containerfile"
"""A target repo's own image recipe (read from its default branch) replaces the default."""


class SandboxUnavailable(Exception):
    """The sandbox cannot run anything (runtime missing or broken). One clear message."""


class SandboxPreparationFailed(SandboxUnavailable):
    """Making a context's environment ready failed in a way nobody foresaw (an answer of the
    runtime its client could not read, a container changed under it). Nothing of the task
    ran yet and the next try starts from what the runtime says then: the caller tries again
    before it shows this."""


class HostUnreachable(SandboxUnavailable):
    """The machine a context's environment lives on does not answer. The environment stays
    there (it is never recreated elsewhere): the caller keeps the work and tries again
    later, telling its user why it waits."""

    def __init__(self, host: str, url: str) -> None:
        self.host = host
        self.url = url
        super().__init__(f"the agent's host {host} ({url}) is unreachable")


@dataclass(frozen=True)
class InjectedCredential:
    """A secret the sandboxed process never holds. It finds ``placeholder`` in ``env_name``;
    the egress proxy sets ``header: value`` on its requests to ``scheme://host:port`` and
    nowhere else. A sandbox that does not filter egress (host mode) passes the real value."""

    env_name: str
    """The variable the process reads (it gets the placeholder there)."""
    host: str
    """The only host the real value goes to."""
    header: str
    """The header the proxy sets (replacing whatever the process sent in it)."""
    value: str = field(repr=False)
    """The header's whole value, e.g. ``Bearer <token>``."""
    port: int = 443
    scheme: str = "https"
    placeholder: str = "gateway-bot-placeholder"
    """What the process sees instead: of the real value's shape, so clients accept it."""


@dataclass(frozen=True)
class ExecutionContext:
    id: str
    """Opaque: the same id always means the same long-lived execution environment."""
    workspace: Path
    """Where a sandbox keeping the context's directories on this machine keeps them (these
    five): for the sandbox alone. Everyone else goes through ``Sandbox.files``."""
    home: Path
    inbox: Path
    outbox: Path
    storage: Path
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment for processes run in this context (already resolved secrets)."""
    allowlist: tuple[EgressRule, ...] = ()
    """Where processes in this context may connect (through the egress proxy)."""
    network_log: Path | None = None
    """Where this context's allowed and blocked requests are logged, one JSON line each."""
    containerfile: str | None = None
    """The image recipe for this context; None means the sandbox's default."""
    credentials: tuple[InjectedCredential, ...] = ()
    """Secrets in ``env`` (or the task's env) that only the egress proxy may hold."""


IsKnown = Callable[[str], Awaitable[bool]]
"""Does the caller's state know this execution-context id?"""


@dataclass(frozen=True)
class SandboxPaths:
    """Where the context's directories appear to the process inside the sandbox."""

    workspace: str
    home: str
    inbox: str
    outbox: str
    storage: str


@dataclass(frozen=True)
class SandboxContainer:
    """One long-lived execution environment the sandbox keeps between tasks (read-only, for
    ``gateway-bot status`` and the dashboard)."""

    name: str
    context_id: str
    state: str
    """As the runtime says it: "running", "exited", ..."""
    created_at: float | None = None
    """Seconds since the epoch, when the runtime says."""
    host: str | None = None
    """The machine it lives on, for a sandbox with several (None: the one)."""


@dataclass(frozen=True)
class SandboxHost:
    """One machine a sandbox places execution environments on (status and dashboard)."""

    name: str
    url: str
    reachable: bool
    capacity: int
    live: int
    """Running environments there now (0 when unreachable: unknown)."""
    contexts: tuple[str, ...] = ()
    """Context ids placed there for their life (waiting while it is unreachable)."""


@runtime_checkable
class ReportsHosts(Protocol):
    """A sandbox spread over several machines says which, and whether each answers."""

    async def hosts_status(self) -> list[SandboxHost]: ...


@runtime_checkable
class HoldsEgress(Protocol):
    """A sandbox whose egress proxy holds requests matching ask rules (default: every git
    push over HTTP) until the daemon decides: the daemon sets who decides. Without one,
    held requests are refused."""

    def set_egress_ask(self, ask: EgressAsk | None) -> None: ...


class KeptProcesses(Protocol):
    """Processes kept running in containers between tasks (warm agent sessions): they keep
    a container busy, so the idle stop and the cap ask here which are idle and end them."""

    def idle_since(self) -> Mapping[str, float]:
        """Context id -> when (``time.monotonic``) its kept process was last used."""
        ...

    async def end(self, context_id: str) -> None:
        """End the context's kept process (it has exited when this returns)."""
        ...


@runtime_checkable
class KeepsProcesses(Protocol):
    """A sandbox that keeps its containers between tasks and stops idle ones: it asks its
    kept processes (set by the agent's set-up) which are idle. The agent's set-up checks
    for this protocol rather than for the podman sandbox, which it must not import."""

    @property
    def kept_processes(self) -> KeptProcesses | None: ...

    @kept_processes.setter
    def kept_processes(self, kept: KeptProcesses | None) -> None: ...


@runtime_checkable
class MeasuresContainers(Protocol):
    """A sandbox that can say what one of its containers uses (the dashboard's conversation
    page asks; ``list_containers`` stays cheap for the status snapshot's every few seconds)."""

    async def container_memory(self, name: str) -> int | None:
        """Bytes of memory the running container ``name`` uses now; None when it is not
        running or the runtime does not say."""
        ...


class SandboxProcess(Protocol):
    @property
    def stdout(self) -> asyncio.StreamReader: ...

    async def read_stderr(self) -> str:
        """All of stderr once the process has ended (bounded)."""
        ...

    async def wait(self) -> int: ...

    def kill(self) -> None:
        """Kill the process and everything it started. Safe to call more than once."""
        ...

    async def write(self, data: bytes) -> None:
        """Write to the process's stdin and wait until the pipe took it. Only for a process
        started with ``keep_stdin=True`` (a warm agent session's next turn); raises
        ConnectionError when stdin is closed or the process has gone."""
        ...

    def close_stdin(self) -> None:
        """End the process's input (it reads end of file). Safe to call more than once."""
        ...

    async def end_others(self) -> None:
        """End everything running in this process's execution environment but the process
        itself: what it started and left in the background (its children included). A
        process kept between tasks (a warm agent session) calls it after each turn, so that
        background processes end with their task as they do when a process exits."""
        ...


class Sandbox(Protocol):
    @property
    def name(self) -> str: ...

    async def check(self) -> None:
        """Raise SandboxUnavailable with a user-facing reason if nothing can run."""
        ...

    async def open(self, is_known: IsKnown) -> None:
        """Start of the daemon, before any task: find what a previous run left (containers,
        processes still running in them) and take it over. Execution environments whose id
        ``is_known`` denies are reported and left alone. Starts the idle housekeeping."""
        ...

    async def discard(self, context_id: str) -> None:
        """Remove everything the sandbox holds for the context (garbage collection). The
        context's host directories are the caller's."""
        ...

    def paths(self, context: ExecutionContext) -> SandboxPaths: ...

    def files(self, context: ExecutionContext) -> ContextFiles:
        """The context's files (workspace, home, inbox, outbox, storage), the only way the
        daemon reads or writes them."""
        ...

    async def start(
        self,
        context: ExecutionContext,
        argv: Sequence[str],
        env: Mapping[str, str],
        stdin_data: bytes = b"",
        *,
        keep_stdin: bool = False,
    ) -> SandboxProcess:
        """Start ``argv`` in the context's workspace with ``env`` on top of the context env.

        ``stdin_data`` is written to the process's stdin (prompts go this way: a single argv
        string is capped at 128 KiB by Linux), which is then closed; with ``keep_stdin`` it
        stays open for ``write`` until ``close_stdin`` (or the process ends)."""
        ...

    async def close(self) -> None: ...

    async def reach_host_loopback(self, url: str, *, start: bool = True) -> str:
        """The URL processes in this sandbox use for ``url``, an HTTP service on this host's
        loopback (a local model API). A sandbox whose processes have a loopback of their own
        relays that one port, reachable through its egress filtering only; ``start=False``
        just says where it would be. Raises SandboxUnavailable when it cannot."""
        ...

    async def list_containers(self) -> list[SandboxContainer]:
        """This deployment's execution environments that outlive a task, running or not
        (none for a sandbox whose processes end with each task). Reads only."""
        ...

    async def stop_all(self) -> None:
        """Stop (not remove) everything this sandbox keeps running between tasks, for a front
        end that ends with its user (``chat``); the next ``open`` and ``start`` bring it back.
        Call after ``close``."""
        ...
