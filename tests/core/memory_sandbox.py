"""A sandbox whose contexts' files live in memory only (what a Kubernetes volume or a remote
Podman host's disk is to the daemon: somewhere it cannot open), and an agent acting inside
it. With these the real executor, workspace reports and service run while the host has no
workspace, home, inbox, outbox or storage directory at all: a core that opened one of those
paths itself would find nothing there, or leave one behind.
"""

from __future__ import annotations

import asyncio
import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gateway_bot.agents.base import AgentOutcome, AgentRequest, OnEvent, ResultEvent
from gateway_bot.agents.event_log import EventLog
from gateway_bot.sandbox.base import (
    ExecutionContext,
    IsKnown,
    SandboxContainer,
    SandboxPaths,
    SandboxProcess,
    SandboxUnavailable,
)
from gateway_bot.sandbox.context_files import (
    DiffBase,
    FileRefused,
    GitOrigin,
    LogTail,
    WorkspaceChanges,
)
from gateway_bot.sandbox.disk_usage import DiskUsage
from gateway_bot.sandbox.workspace_snapshot import WorkspaceUnreadable

INSIDE = SandboxPaths("/workspace", "/home/agent", "/inbox", "/outbox", "/storage")
CLONED = {"README.md": b"# target repo\n"}
"""What a fresh workspace holds (the clone of the test's repo)."""


@dataclass
class MemoryFiles:
    """One context's directories as dictionaries (name -> bytes)."""

    origin: GitOrigin | None = None
    workspace: dict[str, bytes] | None = None
    home: dict[str, bytes] = field(default_factory=dict)
    inbox: dict[str, bytes] = field(default_factory=dict)
    outbox: dict[str, bytes] = field(default_factory=dict)
    storage: dict[str, bytes] = field(default_factory=dict)
    network_log: bytes = b""
    measured: int = 0
    removed: bool = False

    async def ensure_workspace(self, origin: GitOrigin) -> None:
        self.origin = origin
        if self.workspace is None:
            self.workspace = dict(CLONED)

    async def workspace_exists(self) -> bool:
        return self.workspace is not None

    async def put_inbox(self, names: Sequence[str], source: Path) -> str:
        data = await asyncio.to_thread(source.read_bytes)  # staged on the daemon's disk
        for name in names:
            if name not in self.inbox:
                self.inbox[name] = data
                return name
        raise FileRefused(f"{names[0]}: no free name")

    async def take_outbox(self, into: Path, skip: frozenset[str]) -> list[Path]:
        taken = []
        for name in sorted(set(self.outbox) - skip):
            await asyncio.to_thread(into.mkdir, parents=True, exist_ok=True)
            await asyncio.to_thread((into / name).write_bytes, self.outbox.pop(name))
            taken.append(into / name)
        return taken

    async def take_outbox_file(self, name: str, limit: int) -> bytes | None:
        data = self.outbox.pop(name, None)
        if data is not None and len(data) > limit:
            raise FileRefused(f"has {len(data):,} bytes")
        return data

    async def workspace_changes(self, base: DiffBase) -> WorkspaceChanges:
        if self.workspace is None:
            raise WorkspaceUnreadable("Nothing to show yet: the first message clones the repo.")
        changed = sorted(
            n for n in {*CLONED, *self.workspace} if CLONED.get(n) != self.workspace.get(n)
        )
        patch = ""
        for name in changed:
            before = CLONED.get(name, b"").decode().splitlines(keepends=True)
            after = self.workspace.get(name, b"").decode().splitlines(keepends=True)
            patch += "".join(difflib.unified_diff(before, after, f"a/{name}", f"b/{name}"))
        listing = "\n".join(f"  M {name}" for name in changed)
        summary = f"Uncommitted changes:\n{listing}" if changed else "No changes."
        return WorkspaceChanges(summary, patch)

    async def measure(self) -> DiskUsage:
        self.measured += 1
        sizes = [
            (name, sum(len(data) for data in (files or {}).values()))
            for name, files in (
                ("workspace", self.workspace),
                ("home", self.home),
                ("inbox", self.inbox),
                ("outbox", self.outbox),
                ("storage", self.storage),
            )
        ]
        return DiskUsage(tuple(sorted(sizes, key=lambda pair: -pair[1])), True)

    async def put_home_file(self, relative: str, data: bytes) -> None:
        self.home[relative] = data

    async def make_home_dir(self, relative: str) -> None:
        return None

    async def remove(self) -> None:
        self.removed = True

    async def network_log_tail(self, limit: int) -> LogTail | None:
        if not self.network_log:
            return None
        return LogTail(self.network_log[-limit:], cut=len(self.network_log) > limit)


class MemorySandbox:
    """Every context's files in memory; nothing runs (the agent below acts on the files)."""

    name = "memory"

    def __init__(self) -> None:
        self.contexts: dict[str, MemoryFiles] = {}

    def files(self, context: ExecutionContext) -> MemoryFiles:
        return self.contexts.setdefault(context.id, MemoryFiles())

    def paths(self, context: ExecutionContext) -> SandboxPaths:
        return INSIDE

    async def check(self) -> None:
        return None

    async def open(self, is_known: IsKnown) -> None:
        return None

    async def discard(self, context_id: str) -> None:
        self.contexts.pop(context_id, None)

    async def start(
        self,
        context: ExecutionContext,
        argv: Sequence[str],
        env: Mapping[str, str],
        stdin_data: bytes = b"",
        *,
        keep_stdin: bool = False,
    ) -> SandboxProcess:
        raise SandboxUnavailable("nothing runs in the memory sandbox")

    async def close(self) -> None:
        return None

    async def reach_host_loopback(self, url: str, *, start: bool = True) -> str:
        return url

    async def list_containers(self) -> list[SandboxContainer]:
        return []

    async def stop_all(self) -> None:
        return None


class AgentInside:
    """The agent, working in its environment: words in the prompt say what it does.

    ``read:NAME`` answers with the inbox file NAME's text; ``write:NAME=TEXT`` puts TEXT in
    the workspace file NAME; ``grow:NAME=N`` makes the workspace file NAME N bytes;
    ``send:NAME=TEXT`` leaves TEXT in the outbox as NAME; ``fetch:URL`` is a request its
    egress filtering allowed (in the network log)."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    async def run(
        self,
        request: AgentRequest,
        sandbox: object,
        context: ExecutionContext,
        event_log: EventLog,
        on_event: OnEvent,
    ) -> AgentOutcome:
        assert isinstance(sandbox, MemorySandbox)
        files = sandbox.files(context)
        assert files.workspace is not None, "the agent ran before its workspace was cloned"
        self.prompts.append(request.prompt)
        said = []
        for word in request.prompt.split():
            verb, colon, rest = word.partition(":")
            name, _, value = rest.partition("=")
            if not colon or not name:
                continue  # the prompt's own words ("send", "read")
            if verb == "read":
                said.append(f"{name} says {files.inbox[name].decode()!r}")
            elif verb == "write":
                files.workspace[name] = f"{value}\n".encode()
            elif verb == "grow":
                files.workspace[name] = b"x" * int(value)
            elif verb == "send":
                files.outbox[name] = value.encode()
            elif verb == "fetch":
                line = {"time": "t", "method": "GET", "url": rest, "allowed": True}
                files.network_log += json.dumps(line).encode() + b"\n"
        text = "; ".join(said) or "done"
        result = ResultEvent(False, "success", text, "session-1", 0.0, 1, 0.0, 0, 0)
        return AgentOutcome(result, "session-1", 0, "")
