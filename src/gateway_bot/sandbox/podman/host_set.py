"""The hosts of one podman sandbox and where each context lives: placement of a new context,
the host of a placed one, and the read-only views (containers, hosts) status asks for.

Split from ``sandbox.py``, which keeps the container lifecycle; the rules are in
``hosts.py``'s docstring.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from pathlib import Path

from gateway_bot.sandbox.base import (
    HostUnreachable,
    SandboxContainer,
    SandboxHost,
    SandboxUnavailable,
)
from gateway_bot.sandbox.podman import containers as spec
from gateway_bot.sandbox.podman.container_calls import created_at
from gateway_bot.sandbox.podman.hosts import Placements, PodmanHost, most_free
from gateway_bot.sandbox.podman.proxy import LABEL_CONTEXT

log = logging.getLogger(__name__)


class HostSet:
    def __init__(self, hosts: list[PodmanHost], placement_file: Path) -> None:
        self.hosts = hosts
        self.placements = Placements(placement_file)
        self._placing = asyncio.Lock()

    @property
    def several(self) -> bool:
        """Configured hosts (even one): placements are kept and a down host waits."""
        return len(self.hosts) > 1 or self.hosts[0].service.url is not None

    def host_of(self, context_id: str) -> PodmanHost | None:
        """The host the context is placed on (the only one without ``hosts``); None when it
        is not placed yet."""
        if not self.several:
            return self.hosts[0]
        placed = self.placements.get(context_id)
        return next((h for h in self.hosts if h.name == placed), None)

    async def located(self, context_id: str) -> PodmanHost | None:
        """``host_of``, after reading the placements again when this process knows none:
        another replica may have placed the context since (a take-over, a collection)."""
        host = self.host_of(context_id)
        if host is None and self.several:
            await self.placements.reload()
            host = self.host_of(context_id)
        return host

    async def running(self, host: PodmanHost, foreign: Collection[str] = ()) -> list[str]:
        """Context ids whose container runs on ``host``."""
        return [
            info["Labels"][LABEL_CONTEXT]
            for info in await host.calls.our_containers()
            if info["State"] == "running" and info["Labels"][LABEL_CONTEXT] not in foreign
        ]

    async def place(self, context_id: str, busy: Callable[[str], bool]) -> PodmanHost:
        """The context's host: where it was placed, or, for a new one, the reachable host
        with the most free capacity (running containers and starting ones, ``busy``,
        counted). Raises HostUnreachable when no host answers."""
        host = await self.located(context_id)
        if host is not None:
            return host
        placed = self.placements.get(context_id)
        if placed is not None:
            raise SandboxUnavailable(
                f"this conversation's container lives on host {placed}, which is no longer in "
                "sandbox.podman.hosts; add it back (or remove the conversation with /new)"
            )
        async with self._placing:
            free: dict[str, int] = {}
            for candidate in self.hosts:
                if not await candidate.service.answers():
                    continue
                running = set(await self.running(candidate))
                starting = {
                    c for c in self.placements.on(candidate.name) if c not in running and busy(c)
                }
                free[candidate.name] = candidate.capacity - len(running | starting)
            if not free:
                names = ", ".join(h.name for h in self.hosts)
                raise HostUnreachable(names, "no agent host answers")
            chosen = most_free(free, [h.name for h in self.hosts if h.name in free])
            await self.placements.set(context_id, chosen)
            log.info("context %s placed on host %s (free: %s)", context_id, chosen, free)
        return next(h for h in self.hosts if h.name == chosen)

    async def containers(self) -> list[SandboxContainer]:
        """This deployment's agent containers as podman lists them (foreign ones included:
        they carry our labels, and an operator should see them). With several hosts each
        says where it is; a host that does not answer lists its placed contexts as
        "host unreachable"."""
        found = []
        for host in self.hosts:
            where = host.name if self.several else None
            if self.several and not await host.service.answers():
                await self.placements.reload()  # another process (``status``) knows none yet
                found += [
                    SandboxContainer(spec.container_name(c), c, "host unreachable", None, where)
                    for c in self.placements.on(host.name)
                ]
                continue
            found += [
                SandboxContainer(
                    name=info["Names"][0],
                    context_id=info["Labels"][LABEL_CONTEXT],
                    state=info["State"],
                    created_at=created_at(info),
                    host=where,
                )
                for info in await host.calls.our_containers_listed()
            ]
        return found

    async def status(self, known: Collection[str]) -> list[SandboxHost]:
        """Every host, whether it answers, its capacity, what runs there and who lives
        there (``known``: the contexts of a single host)."""
        report = []
        for host in self.hosts:
            reachable = await host.service.answers()
            live = len(await self.running(host)) if reachable else 0
            placed = self.placements.on(host.name) if self.several else sorted(known)
            report.append(
                SandboxHost(host.name, host.url, reachable, host.capacity, live, tuple(placed))
            )
        return report
