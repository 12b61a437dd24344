"""Decision 0095: the core reaches a conversation's files only through the sandbox
(``Sandbox.files(context)``), never by opening a context directory on the host.

The real executor, workspace reports and service run against a sandbox whose files live in
memory (as a Kubernetes volume or a remote Podman host's disk would, out of the daemon's
reach). An attachment reaches the agent's inbox, the agent's outbox file reaches the
sender, /diff shows the agent's change, the disk limit refuses a conversation its agent
filled and the network log shows its request, while the host never gets a workspace, home,
inbox, outbox or storage directory.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway_bot.agents.claude.backend import CLAUDE_CODE
from gateway_bot.agents.enabled import AgentSet, EnabledAgent
from gateway_bot.config.server import ExecutionSettings
from gateway_bot.core.application import Application
from gateway_bot.core.conversations.executor import AgentDefaults, TaskExecutor
from gateway_bot.core.live_state import DaemonLiveState
from gateway_bot.core.service import GatewayService
from gateway_bot.core.workspaces.directories import Workspaces
from gateway_bot.core.workspaces.inbox_files import InboxWriter
from gateway_bot.core.workspaces.reports import WorkspaceReports
from gateway_bot.domain.messages import InboundMessage, JsonDict, Reply
from tests.conftest import make_repo
from tests.core.conftest import World
from tests.core.fakes import FakeChannel
from tests.core.memory_sandbox import AgentInside, MemorySandbox

CONTEXT_DIRECTORIES = {"workspace", "home", "inbox", "outbox", "storage"}


class FileChannel(FakeChannel):
    """A channel that really downloads attachments (through the inbox writer it is given)
    and hands out the files of a reply (what the person receives)."""

    def __init__(self) -> None:
        super().__init__()
        self.uploads: dict[str, bytes] = {}
        self.received: list[tuple[str, bytes]] = []

    async def save_attachments(self, message: InboundMessage, inbox: InboxWriter) -> list[str]:
        return [await inbox.save(a.filename, self.uploads[a.filename]) for a in message.attachments]

    async def send_reply(self, context: JsonDict, task_id: str, reply: Reply) -> None:
        for sent in map(Path, reply.files):
            self.received.append((sent.name, await asyncio.to_thread(sent.read_bytes)))
        await super().send_reply(context, task_id, reply)


class FilesWorld(World):
    """The core world with the real executor and /diff over the memory sandbox."""

    def __init__(self, tmp_path: Path, inside: AgentInside | None = None) -> None:
        self.files_channel = FileChannel()
        super().__init__(tmp_path, channel=self.files_channel)
        self.sandbox = MemorySandbox()
        self.inside = inside or AgentInside()
        self.state_dir = tmp_path / "state"
        repo = make_repo(tmp_path / "repo")
        self.workspaces = Workspaces(self.state_dir, str(repo), None)
        agents = AgentSet("claude", {"claude": EnabledAgent(CLAUDE_CODE, self.inside, None)})
        defaults = AgentDefaults(timeout_s=60.0, env={}, timezone="UTC", secrets={})
        limits = ExecutionSettings(conversation_disk_limit_mb=1.0)
        self.executor = TaskExecutor(
            self.store, self.workspaces, self.sandbox, agents, defaults, limits
        )

    async def start(self) -> GatewayService:
        if not self._opened:
            await self.store.open()
            self._opened = True
        self.service = GatewayService(
            self.store,
            {self.channel.name: self.channel},  # type: ignore[dict-item]
            self.executor,
            access=self.access,
            timezone="UTC",
            max_concurrent_tasks=2,
            max_pending_per_conversation=3,
            retry_policy=self.policy,
            sweep_interval_s=0.05,
            workspace_reports=WorkspaceReports(self.workspaces, self.sandbox),
        )
        await self.service.start()
        return self.service


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[FilesWorld]:
    world = FilesWorld(tmp_path)
    await world.start()
    try:
        yield world
    finally:
        await world.close()


async def test_files_in_and_out_diff_and_quota_go_through_the_sandbox_alone(
    world: FilesWorld,
) -> None:
    channel = world.files_channel
    channel.uploads["notes.txt"] = b"from alice"
    first = await world.hear(
        {
            "text": "read:notes.txt write:README.md=changed-by-the-agent send:report.txt=findings"
            " fetch:https://pypi.org/simple/",
            "files": ["notes.txt"],
        },
        "alice",
    )
    reply = await world.reply(first)
    assert "notes.txt says 'from alice'" in reply.text, "the attachment reached the inbox"
    assert channel.received == [("report.txt", b"findings")], "the outbox file went out"
    assert "/inbox/notes.txt" in world.inside.prompts[0], "named as the agent sees it"
    conversation_id = (await world.task(first)).conversation_id
    files = world.sandbox.contexts[conversation_id]
    assert files.outbox == {}, "taken once"
    assert files.origin is not None
    assert files.origin.mirror == world.state_dir / "git-mirror", "cloned from the mirror"

    await world.say("/diff")
    shown = await world.until(
        lambda: [t for t in channel.texts("dm") if "README.md" in t], "the /diff answer"
    )
    assert "+changed-by-the-agent" in shown[0], shown[0]
    assert "M README.md" in shown[0], shown[0]
    assert "/workspace inside the agent's container" in shown[0]

    filled = await world.say("grow:big.bin=2000000")
    assert "done" in (await world.reply(filled)).text
    refused = await world.say("anything more?")
    text = (await world.reply(refused)).text
    assert "This message was not run" in text, text
    assert "workspace 1.9 MB" in text, text
    assert files.measured >= 3, "measured before each task (and while it ran)"

    application = Application(
        world.store,
        DaemonLiveState({channel.name: channel}, world.sandbox),  # type: ignore[arg-type]
        context_files=lambda conversation: world.sandbox.files(
            world.workspaces.execution_context(conversation)
        ),
    )
    [request] = (await application.network_log(conversation_id)).requests
    assert (request.url, request.allowed) == ("https://pypi.org/simple/", True)

    root = world.workspaces.dirs(conversation_id).root
    on_host = {entry.name for entry in root.iterdir()}
    assert not on_host & CONTEXT_DIRECTORIES, f"the core made context directories: {on_host}"
    assert not any(root.parent.parent.rglob("notes.txt")), "the upload is not on the host"
