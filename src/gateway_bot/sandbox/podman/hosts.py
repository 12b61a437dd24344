"""The machines agent containers run on, and which context lives on which.

Each host (``sandbox.podman.hosts``) is a Podman REST service with its own image store, its
own egress proxy (same allowlists: the routes of the contexts placed there) and a capacity
(live containers at most). Without configured hosts there is one, ``local``: today's single
service at ``sandbox.podman.socket``, which the daemon starts when nothing answers.

A context is placed once, on the reachable host with the most free capacity, and stays there
for its life: its container, network and proxy route are there. The placement is this
sandbox's own file of record, ``<state>/sandbox/placement.json`` (context id -> host name;
replaced atomically), so a restart finds every container on its own host. Replicas on one
``state_dir`` share it: each change is made to the file as read under its lock
(``placement.json.lock``), never from one replica's copy, which lacked the others'
placements (a replica placing one context dropped the contexts another had placed, and one
taking over such a context placed it again, on another host, away from its container). A
host that does not answer keeps its contexts: their tasks wait (``HostUnreachable``), they
are never recreated elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway_bot.config.sandbox import SandboxSettings
from gateway_bot.sandbox import shared_lock
from gateway_bot.sandbox.podman.container_calls import ContainerCalls
from gateway_bot.sandbox.podman.images import ImageBuilder
from gateway_bot.sandbox.podman.proxy import EgressProxy
from gateway_bot.sandbox.podman.service import PodmanService

log = logging.getLogger(__name__)

LOCAL = "local"


@dataclass
class PodmanHost:
    """One machine's podman: service, images, egress proxy and container calls."""

    name: str
    capacity: int
    service: PodmanService
    images: ImageBuilder
    proxy: EgressProxy
    calls: ContainerCalls
    shares_state_dir: bool = True
    """Sees the daemon's state directory at the same path: bind mounts and
    ``HostContextFiles``. Otherwise named volumes reached through its API (decision 0130)."""

    @property
    def url(self) -> str:
        return self.service.base_url


def make_hosts(
    settings: SandboxSettings, work_dir: Path, deployment: str, agent_files: Mapping[str, Path]
) -> list[PodmanHost]:
    """The configured hosts in order, or the one local service (its files where they have
    always been: ``<work_dir>/egress``, builds under ``<work_dir>``)."""
    configured = settings.podman.hosts
    if not configured:
        service = PodmanService(settings.podman, work_dir)
        capacity = settings.max_live_containers
        return [_host(settings, LOCAL, capacity, service, work_dir, deployment, agent_files)]
    hosts = []
    for entry in configured:
        directory = work_dir / "hosts" / entry.name
        service = PodmanService(
            settings.podman,
            directory,
            url=entry.url,
            host=entry.name,
            ssh_identity=entry.identity,
            ssh_known_hosts=entry.known_hosts,
        )
        capacity = entry.capacity
        host = _host(settings, entry.name, capacity, service, directory, deployment, agent_files)
        host.shares_state_dir = entry.shares_state
        if not entry.shares_state:
            host.proxy.use_volume()
        hosts.append(host)
    return hosts


def _host(
    settings: SandboxSettings,
    name: str,
    capacity: int,
    service: PodmanService,
    directory: Path,
    deployment: str,
    agent_files: Mapping[str, Path],
) -> PodmanHost:
    images = ImageBuilder(
        service,
        settings.image,
        agent_files,
        directory,
        refresh_in_background=True,
        limits=settings.limits,
    )
    proxy = EgressProxy(service, images, deployment, settings.egress_network, directory / "egress")
    return PodmanHost(name, capacity, service, images, proxy, ContainerCalls(service, deployment))


class Placements:
    """Context id -> host name, kept in one JSON file; the replicas sharing a ``state_dir``
    write it in turn (``shared_lock``), each change made to what the file holds."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock_path = path.with_name(path.name + ".lock")
        self._placed: dict[str, str] = {}
        self._lock = asyncio.Lock()

    async def reload(self) -> None:
        """Read the file again (another replica may have placed or dropped contexts)."""
        async with self._as_the_file_holds():
            pass

    @contextlib.asynccontextmanager
    async def _as_the_file_holds(self) -> AsyncIterator[None]:
        """This replica's turn at the file (after its other changes' and other replicas'),
        with what the file holds loaded: a change is made to that, not to an old copy."""
        async with self._lock, shared_lock.held(self._lock_path):
            await asyncio.to_thread(self.load)
            yield

    def load(self) -> None:
        try:
            data = json.loads(self._path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("%s unreadable (%s): placements start empty", self._path, exc)
            return
        placed = data.get("contexts") if isinstance(data, dict) else None
        if isinstance(placed, dict):
            self._placed = {str(k): str(v) for k, v in placed.items()}

    def get(self, context_id: str) -> str | None:
        return self._placed.get(context_id)

    def on(self, host: str) -> list[str]:
        return sorted(c for c, h in self._placed.items() if h == host)

    async def set(self, context_id: str, host: str) -> None:
        async with self._as_the_file_holds():
            self._placed[context_id] = host
            await asyncio.to_thread(self._write, dict(self._placed))

    async def drop(self, context_id: str) -> None:
        async with self._as_the_file_holds():
            if self._placed.pop(context_id, None) is not None:
                await asyncio.to_thread(self._write, dict(self._placed))

    def _write(self, placed: dict[str, str]) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        partial = self._path.with_suffix(".json.partial")
        partial.unlink(missing_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(partial, flags, 0o600), "w") as handle:
            handle.write(json.dumps({"contexts": placed}, indent=1, sort_keys=True))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, self._path)


def most_free(free: Mapping[str, int], order: list[str]) -> str:
    """The host with the most free capacity; a tie goes to the one listed first."""
    return max(order, key=lambda name: (free[name], -order.index(name)))
