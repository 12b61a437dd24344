"""Which of a host's containers to stop, and when: one unused for ``idle_stop_minutes``, and
past the host's cap (``max_live_containers``, or its capacity) the longest idle first.

Split from ``sandbox.py``, which keeps the container lifecycle. Here because a warm agent
session (``KeptProcesses``) keeps a container busy between tasks without a task running:
the idle clock asks it, and a container stopped here ends its kept process first. State
lives in ``ContextState``, one per context, shared with the sandbox (its lock and ``busy``
are what a task holds).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Collection
from dataclasses import dataclass, field

from podman.errors import NotFound, PodmanError

from gateway_bot.config.sandbox import SandboxSettings
from gateway_bot.sandbox.base import HostUnreachable, KeptProcesses, SandboxUnavailable
from gateway_bot.sandbox.podman import containers as spec
from gateway_bot.sandbox.podman.host_set import HostSet
from gateway_bot.sandbox.podman.hosts import PodmanHost
from gateway_bot.sandbox.podman.strays import ProcessIdentity

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KnownContainer:
    """A context's container as podman last described it (its listing at start-up, an
    inspect): running on ``image_id`` with the right init and user namespace, its init the
    process ``init``. While that process runs the container does, unchanged (an image, an
    init or a user namespace changes only with a new container, whose init is another
    process): a task then skips asking podman (``container_lifecycle``)."""

    image_id: str
    init: ProcessIdentity


@dataclass
class ContextState:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    busy: bool = False
    last_used: float = field(default_factory=time.monotonic)
    broken: bool = False
    """Died mid-task: the next task gets a fresh container."""
    unswept: bool = False
    """A task's processes may still run in the container: its after-exit step could not
    clear them (the host's service stopped answering), or its start failed after podman
    may have started it. The next task clears the container before its own exec."""
    known: KnownContainer | None = None
    """Set only for a container on this machine (its init is in this /proc)."""


class IdleStops:
    def __init__(
        self,
        settings: SandboxSettings,
        hosts: HostSet,
        contexts: dict[str, ContextState],
        foreign: Collection[str],
    ) -> None:
        self._settings = settings
        self._hosts = hosts
        self._contexts = contexts
        self._foreign = foreign
        self.kept_processes: KeptProcesses | None = None
        self._making_room: dict[str, asyncio.Lock] = {}
        """One making of room per host at a time (``enforce_cap``), by host name."""

    async def housekeep(self) -> None:
        """For ever: stop idle containers, enforce caps, and prune old images hourly."""
        interval = max(0.5, min(60.0, self._settings.idle_stop_minutes * 60 / 4))
        pruned_at = time.monotonic()
        while True:
            await asyncio.sleep(interval)
            prune = time.monotonic() - pruned_at > 3600
            if prune:
                pruned_at = time.monotonic()
            for host in self._hosts.hosts:
                try:
                    await self.stop_idle(host)
                    for image in await host.images.prune() if prune else []:
                        log.info("removed unused old image %s on %s", image, host.name)
                except HostUnreachable as exc:
                    log.debug("housekeeping skipped: %s", exc)
                except (PodmanError, OSError, SandboxUnavailable) as exc:
                    log.warning("sandbox housekeeping on %s failed: %s", host.name, exc)

    async def stop_idle(self, host: PodmanHost) -> None:
        await host.service.ensure_running()
        idle_s = self._settings.idle_stop_minutes * 60
        now = time.monotonic()
        for context_id in await self.running_contexts(host):
            since = self.idle_since(context_id)
            if since is not None and now - since > idle_s:
                await self.stop(host, context_id, "idle")
        await self.enforce_cap(host, keep=None)

    def idle_since(self, context_id: str) -> float | None:
        """When the context's container was last used; None while a task runs in it. A kept
        process between tasks (a warm agent session) does not count as a task."""
        state = self._contexts.get(context_id)
        if state is None:
            return None
        kept = self.kept_processes.idle_since() if self.kept_processes is not None else {}
        if context_id in kept:
            return kept[context_id]
        return None if state.busy else state.last_used

    async def enforce_cap(self, host: PodmanHost, keep: str | None) -> None:
        """Stop the longest idle containers past the host's cap. Once per host at a time,
        each on a listing taken under that turn: two tasks starting together each counted
        the other's container and chose the same idle one (the second stop met a stopped
        container), or stopped two where one made room."""
        lock = self._making_room.setdefault(host.name, asyncio.Lock())
        async with lock:
            running = await self.running_contexts(host)
            idle = sorted(
                (since, c)
                for c in running
                if c != keep and (since := self.idle_since(c)) is not None
            )
            excess = len(running) - host.capacity
            for _, context_id in idle[: max(0, excess)]:
                await self.stop(host, context_id, f"more than {host.capacity} running")

    async def stop(self, host: PodmanHost, context_id: str, why: str) -> None:
        kept = self.kept_processes
        if kept is not None and context_id in kept.idle_since():
            await kept.end(context_id)  # a warm session ends with its container
        state = self._contexts[context_id]
        if state.lock.locked() or state.busy:
            return
        async with state.lock:
            name = spec.container_name(context_id)
            log.info("stopping container %s (%s)", name, why)
            # Stopped meanwhile (behind the daemon's back, or by its own init) is stopped:
            # podman answers 304 with no body, which podman-py reads as JSON unless told
            # to ignore it ("Expecting value: line 1 column 1").
            with contextlib.suppress(NotFound):
                await host.service.api(
                    lambda c: c.containers.get(name).stop(timeout=5, ignore=True)
                )

    async def running_contexts(self, host: PodmanHost) -> list[str]:
        return await self._hosts.running(host, self._foreign)
