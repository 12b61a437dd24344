"""``Sandbox.files`` when some host does not share the daemon's state directory (decision
0130): each operation goes to the implementation of the host the context is placed on.

A context on a host that shares the directory (or on none yet: nothing of it exists
anywhere) gets ``HostContextFiles``, as with a single local host; one on a host that does
not gets ``VolumeContextFiles``. Only the workspace's clone places a context (it is the first
thing a task does); the other operations never place one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from gateway_bot.sandbox.base import ExecutionContext
from gateway_bot.sandbox.context_files import (
    ContextFiles,
    DiffBase,
    GitOrigin,
    LogTail,
    WorkspaceChanges,
)
from gateway_bot.sandbox.disk_usage import DiskUsage
from gateway_bot.sandbox.host_files import HostContextFiles
from gateway_bot.sandbox.podman import containers as spec
from gateway_bot.sandbox.podman.host_set import HostSet
from gateway_bot.sandbox.podman.hosts import PodmanHost
from gateway_bot.sandbox.podman.volume_files import VolumeContextFiles

Prepare = Callable[[ExecutionContext], Awaitable[None]]
"""Make or start the context's container under its lock, unless a task is preparing or
running it (the context a files call has carries no allowlist: its route would replace the
task's; the next task's preparation routes it again)."""


def files_for(
    context: ExecutionContext, hosts: HostSet, busy: Callable[[str], bool], prepare: Prepare
) -> ContextFiles:
    """``HostContextFiles`` when every host shares the state directory (a single local host
    included: exactly as before), else the per-host dispatch."""
    if all(host.shares_state_dir for host in hosts.hosts):
        return HostContextFiles.of(context)
    return PlacedContextFiles(context, hosts, busy, prepare)


class PlacedContextFiles:
    def __init__(
        self,
        context: ExecutionContext,
        hosts: HostSet,
        busy: Callable[[str], bool],
        prepare: Prepare,
    ) -> None:
        self._context = context
        self._hosts = hosts
        self._busy = busy
        self._prepare = prepare

    async def _files(self, place: bool = False) -> ContextFiles:
        context_id = self._context.id
        if place:
            host: PodmanHost | None = await self._hosts.place(context_id, self._busy)
        else:
            host = await self._hosts.located(context_id)
        daemon_side = HostContextFiles.of(self._context)
        if host is None or host.shares_state_dir:
            return daemon_side
        service = host.service

        async def ready() -> None:
            """Only a container that does not run is prepared: a running one may be in a
            task, whose preparation is not to be repeated under it."""
            info = await host.calls.inspect(spec.container_name(context_id))
            if info is None or not info["State"]["Running"]:
                await self._prepare(self._context)

        return VolumeContextFiles(service, context_id, ready, daemon_side, host.proxy.volume)

    async def ensure_workspace(self, origin: GitOrigin) -> None:
        await (await self._files(place=True)).ensure_workspace(origin)

    async def workspace_exists(self) -> bool:
        return await (await self._files()).workspace_exists()

    async def put_inbox(self, names: Sequence[str], source: Path) -> str:
        return await (await self._files()).put_inbox(names, source)

    async def take_outbox(self, into: Path, skip: frozenset[str]) -> list[Path]:
        return await (await self._files()).take_outbox(into, skip)

    async def take_outbox_file(self, name: str, limit: int) -> bytes | None:
        return await (await self._files()).take_outbox_file(name, limit)

    async def workspace_changes(self, base: DiffBase) -> WorkspaceChanges:
        return await (await self._files()).workspace_changes(base)

    async def measure(self) -> DiskUsage:
        return await (await self._files()).measure()

    async def put_home_file(self, relative: str, data: bytes) -> None:
        await (await self._files()).put_home_file(relative, data)

    async def make_home_dir(self, relative: str) -> None:
        await (await self._files()).make_home_dir(relative)

    async def remove(self) -> None:
        await (await self._files()).remove()

    async def network_log_tail(self, limit: int) -> LogTail | None:
        return await (await self._files()).network_log_tail(limit)
