"""The Podman sandbox: a long-lived container per execution context, each task an exec.

Lifecycle of a context's container ``gwb-<context>``: created on the context's first task,
kept running between tasks, stopped after ``idle_stop_minutes`` unused (or earlier when more
than ``max_live_containers`` run: the longest idle first), started again by the next task,
recreated when its image changes or it died mid-task, removed by ``discard`` (garbage
collection). State lives in podman itself (labels), not in files of ours: after a restart,
clean or kill -9, ``open`` lists this deployment's containers by label and takes them over;
a restart never stops a running container.

With several hosts (``hosts.py``) a context is placed on one for its life (the one file of
record of placements); each host has its own proxy, images and cap (its capacity).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from podman.errors import NotFound, PodmanError

from gateway_bot.config.sandbox import SandboxSettings
from gateway_bot.sandbox.base import (
    ExecutionContext,
    HostUnreachable,
    IsKnown,
    SandboxContainer,
    SandboxHost,
    SandboxPaths,
    SandboxUnavailable,
)
from gateway_bot.sandbox.child import RUN_MARK, spawn_fed
from gateway_bot.sandbox.egress.held import EgressAsk
from gateway_bot.sandbox.egress.rules import ASK, EgressRule
from gateway_bot.sandbox.host_files import HostContextFiles
from gateway_bot.sandbox.podman import containers as spec
from gateway_bot.sandbox.podman.egress_asks import EgressAskListener
from gateway_bot.sandbox.podman.exec_env import ExecEnvError, ExecEnvFiles
from gateway_bot.sandbox.podman.host_set import HostSet
from gateway_bot.sandbox.podman.hosts import PodmanHost, make_hosts
from gateway_bot.sandbox.podman.model_relay import ModelRelay, loopback_target
from gateway_bot.sandbox.podman.process import PodmanExecProcess
from gateway_bot.sandbox.podman.proxy import LABEL_CONTEXT, LABEL_DEPLOYMENT, LABEL_ROLE

log = logging.getLogger(__name__)

_CONTEXT_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


@dataclass
class _Context:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    busy: bool = False
    last_used: float = field(default_factory=time.monotonic)
    broken: bool = False
    """Died mid-task: the next task gets a fresh container."""


class KeptProcesses(Protocol):
    """Processes kept running in containers between tasks (warm agent sessions): they keep
    a container busy, so the idle stop and the cap ask here which are idle and end them."""

    def idle_since(self) -> Mapping[str, float]:
        """Context id -> when (``time.monotonic``) its kept process was last used."""
        ...

    async def end(self, context_id: str) -> None:
        """End the context's kept process (it has exited when this returns)."""
        ...


def deployment_for(state_dir: Path) -> str:
    return hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:8]


class PodmanSandbox:
    name = "podman"

    def __init__(
        self, settings: SandboxSettings, state_dir: Path, agent_files: Mapping[str, Path]
    ) -> None:
        self._settings = settings
        self.deployment = settings.deployment or deployment_for(state_dir)
        work_dir = state_dir / "sandbox"
        self._hosts = HostSet(
            make_hosts(settings, work_dir, self.deployment, agent_files),
            work_dir / "placement.json",
        )
        approvals = settings.egress_approvals
        self._ask_rules = tuple(
            EgressRule(r.host, tuple(r.paths), tuple(r.methods), tuple(r.ports), action=ASK)
            for r in approvals.ask
        )
        self.hosts = self._hosts.hosts
        first = self.hosts[0]
        self.service, self.images, self.proxy = first.service, first.images, first.proxy
        """The first host's (the only one's, without ``hosts``): checks and the model relay."""
        self._placements = self._hosts.placements
        self._env_files = ExecEnvFiles(work_dir / "exec-env")
        self._contexts: dict[str, _Context] = {}
        self._asks = {
            host.name: EgressAskListener(
                host.proxy.directory, self._contexts.__contains__, approvals.timeout_s
            )
            for host in self.hosts
        }
        """Each host's proxy asks through a socket in its own shared directory."""
        self.egress_asks = self._asks[first.name]
        self._foreign: set[str] = set()
        self._housekeeping: asyncio.Task[None] | None = None
        self._relays: list[ModelRelay] = []
        self.kept_processes: KeptProcesses | None = None
        """Set by the daemon when agent processes outlive their task."""

    @property
    def settings(self) -> SandboxSettings:
        return self._settings

    def set_egress_ask(self, ask: EgressAsk | None) -> None:
        """Who decides a request the egress proxy holds (an ask rule matched). Unset: every
        held request is refused, and the log says so."""
        for listener in self._asks.values():
            listener.ask = ask

    # -- daemon lifecycle -----------------------------------------------------------------

    @property
    def _several(self) -> bool:
        return self._hosts.several

    async def check(self) -> None:
        """With configured hosts a host that does not answer is a warning (its contexts
        wait for it), not a reason to refuse to start."""
        if not self._several:
            await self.service.check()
            return
        for host in self.hosts:
            try:
                await host.service.check()
            except HostUnreachable as exc:
                log.warning("%s: its conversations wait until it answers", exc)

    async def open(self, is_known: IsKnown) -> None:
        await asyncio.to_thread(self._placements.load)
        await asyncio.to_thread(self._env_files.clear)
        for host in self.hosts:
            await self._asks[host.name].start()
            try:
                await self._open_host(host, is_known)
            except HostUnreachable as exc:
                log.warning("%s: its conversations wait until it answers", exc)
        self._housekeeping = asyncio.create_task(self._housekeep())

    async def _open_host(self, host: PodmanHost, is_known: IsKnown) -> None:
        await host.service.ensure_running()
        any_running = False
        for info in await host.calls.our_containers():
            name, context_id = info["Names"][0], info["Labels"][LABEL_CONTEXT]
            placed = self._placements.get(context_id)
            if self._several and placed is not None and placed != host.name:
                log.warning(
                    "container %s on host %s belongs to a context placed on %s: left alone",
                    name, host.name, placed,
                )  # fmt: skip
                continue
            if not await is_known(context_id):
                log.warning(
                    "container %s has this deployment's labels but the state knows no "
                    "context %s: reported and left alone (remove it with `podman rm -f %s`)",
                    name, context_id, name,
                )  # fmt: skip
                self._foreign.add(context_id)
                continue
            self._contexts.setdefault(context_id, _Context())
            if self._several and placed is None:
                await self._placements.set(context_id, host.name)
            if info["State"] == "running":
                any_running = True
                await host.calls.kill_strays(name)
                log.info("reattached to running container %s on %s", name, host.name)
            else:
                log.info("container %s is %s; its next task starts it", name, info["State"])
        if any_running:
            await host.proxy.ensure(await self._networks(host))

    async def close(self) -> None:
        """Stops housekeeping and the relays only: containers keep running for the next
        start (``stop_all`` stops them too)."""
        if self._housekeeping is not None:
            self._housekeeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._housekeeping
        for relay in self._relays:
            await relay.close()
        self._relays.clear()
        for listener in self._asks.values():
            await listener.close()
        for host in self.hosts:
            await host.images.close()

    async def stop_all(self) -> None:
        """Stop (not remove) this deployment's running containers and the egress proxy, then
        the podman service if this process started it: ``chat`` leaves nothing running.
        ``open`` and the next task's ``_prepare`` start them again (same containers)."""
        for host in self.hosts:
            try:
                await self._stop_host(host)
            except HostUnreachable as exc:
                log.warning("%s: nothing stopped there", exc)

    async def _stop_host(self, host: PodmanHost) -> None:
        await host.service.ensure_running()  # an idle service may have exited meanwhile

        async def stop(context_id: str) -> None:
            name = spec.container_name(context_id)
            log.info("stopping container %s (the front end ended)", name)
            with contextlib.suppress(NotFound):
                await host.service.api(lambda c: c.containers.get(name).stop(timeout=5))

        await asyncio.gather(*(stop(c) for c in await self._running_contexts(host)))
        await host.proxy.stop()
        await host.service.stop_if_started_here()

    async def list_containers(self) -> list[SandboxContainer]:
        return await self._hosts.containers()

    async def hosts_status(self) -> list[SandboxHost]:
        """Every host and whether it answers (``ReportsHosts``)."""
        return await self._hosts.status(self._contexts)

    async def container_memory(self, name: str) -> int | None:
        host = self._host_of(name.removeprefix("gwb-"))
        if host is None or not await host.service.answers():
            return None
        return await host.calls.memory(name)

    async def reach_host_loopback(self, url: str, *, start: bool = True) -> str:
        """Loopback in a container is the container: a relay in this process listens on the
        egress network's gateway, for the proxy alone, and forwards to that one port
        (``model_relay.py``). The URL given back names the relay; the caller's allowlist and
        credentials follow it, so requests go through the proxy like any other."""
        target = loopback_target(url)
        relay = ModelRelay(await self.proxy.egress_gateway(), *target, self.proxy.egress_address)
        if start:
            await relay.start()
            self._relays.append(relay)
            log.info("%s is reached through a relay at %s", url, relay.address)
        return relay.relayed(url)

    def paths(self, context: ExecutionContext) -> SandboxPaths:
        return spec.PATHS

    def files(self, context: ExecutionContext) -> HostContextFiles:
        """Bind mounts of host directories: the host implementation. (A remote host's
        named volumes need one of their own: docs/scale-out.md.)"""
        return HostContextFiles.of(context)

    # -- tasks ----------------------------------------------------------------------------

    async def start(
        self,
        context: ExecutionContext,
        argv: Sequence[str],
        env: Mapping[str, str],
        stdin_data: bytes = b"",
        *,
        keep_stdin: bool = False,
    ) -> PodmanExecProcess:
        if not _CONTEXT_ID.match(context.id):
            raise ValueError(f"execution-context id {context.id!r} cannot name a container")
        if context.id in self._foreign:
            raise SandboxUnavailable(
                f"container {spec.container_name(context.id)} was not made by this daemon's "
                "state; it was left alone. Remove it (podman rm -f) to let this task run."
            )
        state = self._contexts.setdefault(context.id, _Context())
        async with state.lock:
            state.busy = True
            try:
                host, name = await self._prepare(context, state)
            except BaseException:
                state.busy = False
                raise
        exec_env = {**context.env, **env}
        # Credentials stay with the egress proxy, which adds them for their host only.
        exec_env.update({c.env_name: c.placeholder for c in context.credentials})
        run_mark = secrets.token_hex(16)  # tells this exec's process apart (``end_others``)
        exec_env[RUN_MARK] = run_mark
        try:
            env_file = await asyncio.to_thread(self._env_files.write, exec_env)
        except ExecEnvError as exc:
            state.busy = False
            raise SandboxUnavailable(f"cannot start the agent: {exc}") from exc
        # The exec's variables travel in a 0600 file: never in the host CLI's environment
        # (a repo's container_env would configure the host's podman) nor in argv.
        command = [
            *await host.service.cli_prefix(),
            "exec",
            "-i",
            "--workdir",
            spec.PATHS.workspace,
        ]
        command += ["--env-file", str(env_file), name, *argv]
        try:
            process = await spawn_fed(
                command, env=host.service.cli_env(), stdin_data=stdin_data, keep_stdin=keep_stdin
            )
        except BaseException:
            state.busy = False
            self._env_files.remove(env_file)
            raise

        async def after_exit(code: int, killed: bool) -> str:
            self._env_files.remove(env_file)
            return await self._after_exit(host, context.id, state, code, killed)

        async def end_others() -> None:
            await host.calls.kill_strays(spec.container_name(context.id), keep_exec=run_mark)

        return PodmanExecProcess(process, after_exit, end_others)

    def _host_of(self, context_id: str) -> PodmanHost | None:
        return self._hosts.host_of(context_id)

    def _busy(self, context_id: str) -> bool:
        state = self._contexts.get(context_id)
        return state is not None and state.busy

    async def _prepare(self, context: ExecutionContext, state: _Context) -> tuple[PodmanHost, str]:
        """Everything a task needs, made or repaired: image, network, proxy and its route,
        and a running container on the current image, on the context's host. Returns the
        host and the container's name."""
        name = spec.container_name(context.id)
        host = await self._hosts.place(context.id, self._busy)
        await host.service.ensure_running()
        image = await host.images.agent_image(context.containerfile)
        network = await spec.ensure_network(host.service, self.deployment, context.id)
        others_busy = any(
            s.busy and self._host_of(c) is host
            for c, s in self._contexts.items()
            if c != context.id
        )
        await host.proxy.ensure(
            [(network.name, network.proxy_address)], may_recreate=not others_busy
        )
        asks = self._asks[host.name]
        await asks.start()
        await host.proxy.set_route(
            network.agent_address,
            context.id,
            (*context.allowlist, *self._ask_rules),  # the repo's asks add to the server's
            context.credentials,
            asks.timeout_s,
        )
        if context.network_log is not None:
            await asyncio.to_thread(_link, context.network_log, host.proxy.log_path(context.id))
        info = await host.calls.inspect(name)
        if info is not None:
            owner = info["Config"]["Labels"].get(LABEL_DEPLOYMENT)
            if owner != self.deployment:
                raise SandboxUnavailable(
                    f"a container named {name} exists but belongs to deployment {owner!r}, "
                    f"not {self.deployment!r}; remove it or set sandbox.deployment"
                )
            reason = (
                "its image changed" if info["Image"] != image.id
                else "it stopped during its last task" if state.broken
                else "its user namespace setting changed"
                if not spec.userns_matches(info, self._settings.userns_host_uid)
                else None
            )  # fmt: skip
            if reason:
                log.info("recreating container %s: %s (mounts are kept)", name, reason)
                await host.calls.remove(name)
                info = None
        state.broken = False
        if info is None:
            create = spec.create_spec(
                context, image.tag, network, self.deployment, host.proxy.ca_certificate,
                self._settings.limits, host.service,
            )  # fmt: skip
            uid = self._settings.userns_host_uid
            if uid is not None:
                mounted = [context.workspace, context.home, context.inbox, context.outbox]
                await spec.hand_over([*mounted, context.storage], uid)
            await host.calls.call(lambda c: spec.create_container(c, create, uid), f"create {name}")
            log.info("created container %s on %s (host %s)", name, image.tag, host.name)
        if info is None or not info["State"]["Running"]:
            await host.calls.call(lambda c: c.containers.get(name).start(), f"start {name}")
            await host.calls.exec_quietly(name, spec.TRUST_CA)
            await self._enforce_cap(host, keep=context.id)
        return host, name

    async def _after_exit(
        self, host: PodmanHost, context_id: str, state: _Context, code: int, killed: bool
    ) -> str:
        state.last_used = time.monotonic()
        name = spec.container_name(context_id)
        try:
            info = await host.calls.inspect(name)
        except (PodmanError, OSError) as exc:  # the host went away during the task
            state.busy = False
            return f"sandbox: the agent's host {host.name} stopped answering ({exc})"
        running = info is not None and info["State"]["Running"]
        if running:
            # After every task, not only a killed one: whatever the agent started in the
            # background (a server, a loop flipping files in the outbox) ends with it. From
            # the host (a scan of /proc, milliseconds), before the reply goes out.
            await host.calls.kill_strays(name, info)
        state.busy = False
        if code != 0 and not running:
            state.broken = True
            return (
                f"sandbox: the container {name} stopped while the task ran (exit {code}); "
                "the next message gets a fresh container with the same workspace."
            )
        return ""

    # -- housekeeping ---------------------------------------------------------------------

    async def _housekeep(self) -> None:
        interval = max(0.5, min(60.0, self._settings.idle_stop_minutes * 60 / 4))
        pruned_at = time.monotonic()
        while True:
            await asyncio.sleep(interval)
            prune = time.monotonic() - pruned_at > 3600
            if prune:
                pruned_at = time.monotonic()
            for host in self.hosts:
                try:
                    await self._stop_idle(host)
                    for image in await host.images.prune() if prune else []:
                        log.info("removed unused old image %s on %s", image, host.name)
                except HostUnreachable as exc:
                    log.debug("housekeeping skipped: %s", exc)
                except (PodmanError, OSError, SandboxUnavailable) as exc:
                    log.warning("sandbox housekeeping on %s failed: %s", host.name, exc)

    async def stop_idle(self) -> None:
        """Stop containers unused for ``idle_stop_minutes``; then enforce each host's cap."""
        for host in self.hosts:
            await self._stop_idle(host)

    async def _stop_idle(self, host: PodmanHost) -> None:
        await host.service.ensure_running()
        idle_s = self._settings.idle_stop_minutes * 60
        now = time.monotonic()
        for context_id in await self._running_contexts(host):
            since = self._idle_since(context_id)
            if since is not None and now - since > idle_s:
                await self._stop(host, context_id, "idle")
        await self._enforce_cap(host, keep=None)

    def _idle_since(self, context_id: str) -> float | None:
        """When the context's container was last used; None while a task runs in it. A kept
        process between tasks (a warm agent session) does not count as a task."""
        state = self._contexts.get(context_id)
        if state is None:
            return None
        kept = self.kept_processes.idle_since() if self.kept_processes is not None else {}
        if context_id in kept:
            return kept[context_id]
        return None if state.busy else state.last_used

    async def _enforce_cap(self, host: PodmanHost, keep: str | None) -> None:
        running = await self._running_contexts(host)
        idle = sorted(
            (since, c) for c in running if c != keep and (since := self._idle_since(c)) is not None
        )
        excess = len(running) - host.capacity
        for _, context_id in idle[: max(0, excess)]:
            await self._stop(host, context_id, f"more than {host.capacity} running")

    async def _stop(self, host: PodmanHost, context_id: str, why: str) -> None:
        kept = self.kept_processes
        if kept is not None and context_id in kept.idle_since():
            await kept.end(context_id)  # a warm session ends with its container
        state = self._contexts[context_id]
        if state.lock.locked() or state.busy:
            return
        async with state.lock:
            name = spec.container_name(context_id)
            log.info("stopping container %s (%s)", name, why)
            with contextlib.suppress(NotFound):
                await host.service.api(lambda c: c.containers.get(name).stop(timeout=5))

    async def discard(self, context_id: str) -> None:
        """On the context's host; HostUnreachable while that host does not answer (the
        collection is tried again later), nothing at all for a context never placed."""
        if context_id in self._foreign:
            return
        host = self._host_of(context_id)
        if host is None:
            self._contexts.pop(context_id, None)
            return
        state = self._contexts.pop(context_id, None) or _Context()
        async with state.lock:
            name, network = spec.container_name(context_id), spec.network_name(context_id)
            await host.service.ensure_running()

            await host.calls.remove(name)
            await host.proxy.disconnect(network)

            def remove_network(client: Any) -> None:
                with contextlib.suppress(NotFound):
                    client.networks.get(network).remove()

            await host.service.api(remove_network)
            await host.proxy.drop_routes(context_id)
            await self._placements.drop(context_id)
            log.info("discarded container %s and network %s on %s", name, network, host.name)

    # -- podman queries -------------------------------------------------------------------

    async def _running_contexts(self, host: PodmanHost) -> list[str]:
        return await self._hosts.running(host, self._foreign)

    async def _networks(self, host: PodmanHost) -> list[tuple[str, str]]:
        """The context networks of the contexts on ``host`` (hosts that share network
        definitions, as on one test machine, list each other's too: those are skipped)."""
        filters = {"label": f"{LABEL_DEPLOYMENT}={self.deployment}"}
        found = await host.service.api(lambda c: c.networks.list(filters=filters))
        labelled = [n.attrs.get("labels") or {} for n in found]
        contexts = [n[LABEL_CONTEXT] for n in labelled if n.get(LABEL_ROLE) == "network"]
        ours = [c for c in contexts if self._host_of(c) is host]
        networks = [await spec.ensure_network(host.service, self.deployment, c) for c in ours]
        return [(n.name, n.proxy_address) for n in networks]


def _link(link: Path, target: Path) -> None:
    """``network.log`` beside the context's other files points at the proxy's log of it."""
    if link.is_symlink() and link.readlink() == target:
        return
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(target)
