"""What only the running daemon knows, behind one protocol: its channels' health and its
containers. The daemon reads them from memory (``DaemonLiveState``); another process
(``gateway-bot status``) reads them from the daemon's status snapshot
(``core/status/snapshot.py``). The application API (``core/application.py``) takes either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gateway_bot.core.channel import ChannelAdapter
from gateway_bot.sandbox.base import MeasuresContainers, Sandbox, SandboxContainer


@dataclass(frozen=True)
class ChannelView:
    name: str
    health: str
    """A ``ChannelHealth`` value: starting, connected, degraded, failed."""
    message: str


class LiveState(Protocol):
    """What only the running daemon knows."""

    def channels(self) -> list[ChannelView]: ...

    async def containers(self) -> list[SandboxContainer]: ...


class DaemonLiveState:
    """The daemon's own view: its adapters' listeners and its sandbox."""

    def __init__(self, adapters: Mapping[str, ChannelAdapter], sandbox: Sandbox) -> None:
        self._adapters = adapters
        self._sandbox = sandbox

    def channels(self) -> list[ChannelView]:
        views = []
        for name, adapter in sorted(self._adapters.items()):
            status = adapter.listener.status
            views.append(ChannelView(name, status.health.value, status.message))
        return views

    async def containers(self) -> list[SandboxContainer]:
        return await self._sandbox.list_containers()

    async def container_memory(self, name: str) -> int | None:
        if isinstance(self._sandbox, MeasuresContainers):
            return await self._sandbox.container_memory(name)
        return None


@runtime_checkable
class MeasuresLiveContainers(Protocol):
    """A live state that can measure a container (the daemon's; not a status snapshot)."""

    async def container_memory(self, name: str) -> int | None: ...
