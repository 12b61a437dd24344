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
from pathlib import Path

from podman.errors import NotFound

from gateway_bot.config.sandbox import SandboxSettings
from gateway_bot.sandbox.base import (
    ExecutionContext,
    HostUnreachable,
    IsKnown,
    KeptProcesses,
    SandboxContainer,
    SandboxHost,
    SandboxPaths,
    SandboxPreparationFailed,
    SandboxProcess,
    SandboxUnavailable,
)
from gateway_bot.sandbox.child import RUN_MARK
from gateway_bot.sandbox.context_files import ContextFiles
from gateway_bot.sandbox.egress.held import EgressAsk
from gateway_bot.sandbox.podman import container_lifecycle, strays
from gateway_bot.sandbox.podman import containers as spec
from gateway_bot.sandbox.podman.api_exec import ExecReleases, exec_body, start_api_exec
from gateway_bot.sandbox.podman.container_lifecycle import ensure_container
from gateway_bot.sandbox.podman.egress_wiring import EgressWiring
from gateway_bot.sandbox.podman.exec_env import ExecEnvError, ExecEnvFiles
from gateway_bot.sandbox.podman.host_set import HostSet
from gateway_bot.sandbox.podman.hosts import PodmanHost, make_hosts
from gateway_bot.sandbox.podman.idle_stops import ContextState, IdleStops
from gateway_bot.sandbox.podman.model_relay import ModelRelay, relay_for
from gateway_bot.sandbox.podman.placed_files import files_for
from gateway_bot.sandbox.podman.process import start_cli_exec
from gateway_bot.sandbox.podman.reattach import reattach_host
from gateway_bot.sandbox.podman.volumes import remove_context

log = logging.getLogger(__name__)

_CONTEXT_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def deployment_for(state_dir: Path) -> str:
    return hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:8]


class PodmanSandbox:
    name = "podman"

    def __init__(
        self, settings: SandboxSettings, state_dir: Path, agent_files: Mapping[str, Path]
    ) -> None:
        self._settings = settings
        self.deployment = settings.deployment or deployment_for(state_dir)
        work_dir = self._work_dir = state_dir / "sandbox"
        self._hosts = HostSet(
            make_hosts(settings, work_dir, self.deployment, agent_files),
            work_dir / "placement.json",
        )
        self.hosts = self._hosts.hosts
        first = self.hosts[0]
        self.service, self.images, self.proxy = first.service, first.images, first.proxy
        """The first host's (the only one's, without ``hosts``): checks and the model relay."""
        self._placements = self._hosts.placements
        self._env_files = ExecEnvFiles(work_dir / "exec-env")
        self._contexts: dict[str, ContextState] = {}
        self._networks: dict[str, spec.ContextNetwork] = {}
        self._egress = EgressWiring(
            settings, self.hosts, self.deployment, self._contexts.__contains__, self._host_of
        )
        self.egress_asks = self._egress.listeners[first.name]
        self._foreign: set[str] = set()
        self._idle = IdleStops(settings, self._hosts, self._contexts, self._foreign)
        self._housekeeping: asyncio.Task[None] | None = None
        self._relays: list[ModelRelay] = []
        self._releases = ExecReleases()

    @property
    def kept_processes(self) -> KeptProcesses | None:
        """Set by the daemon when agent processes outlive their task."""
        return self._idle.kept_processes

    @kept_processes.setter
    def kept_processes(self, kept: KeptProcesses | None) -> None:
        self._idle.kept_processes = kept

    @property
    def settings(self) -> SandboxSettings:
        return self._settings

    def set_egress_ask(self, ask: EgressAsk | None) -> None:
        """Who decides a request the egress proxy holds (an ask rule matched). Unset: every
        held request is refused, and the log says so."""
        self._egress.set_ask(ask)

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
            await self._egress.start(host)
            try:
                networks = await reattach_host(
                    host, self._hosts, is_known, self._contexts, self._foreign, self._egress,
                    self._settings.userns_host_uid,
                )  # fmt: skip
                self._networks.update(networks)  # not looked up again by their first tasks
            except HostUnreachable as exc:
                log.warning("%s: its conversations wait until it answers", exc)
        self._housekeeping = asyncio.create_task(self._idle.housekeep())

    async def close(self) -> None:
        """Stops housekeeping and the relays only: containers keep running for the next
        start (``stop_all`` stops them too)."""
        if self._housekeeping is not None:
            self._housekeeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._housekeeping
        self._releases.release_now()
        for relay in self._relays:
            await relay.close()
        self._relays.clear()
        await self._egress.close()
        for host in self.hosts:
            await host.images.close()
            await host.service.close()

    async def stop_all(self) -> None:
        """Stop (not remove) this deployment's running containers and the egress proxy, then
        the podman service if this process started it: ``chat`` leaves nothing running.
        ``open`` and the next task's ``_prepare`` start them again (same containers)."""
        for host in self.hosts:
            try:
                await self._stop_host(host)
            except HostUnreachable as exc:
                log.warning("%s: nothing stopped there", exc)
            await host.service.close()

    async def _stop_host(self, host: PodmanHost) -> None:
        await host.service.ensure_running()  # an idle service may have exited meanwhile

        async def stop(context_id: str) -> None:
            name = spec.container_name(context_id)
            log.info("stopping container %s (the front end ended)", name)
            with contextlib.suppress(NotFound):
                await host.service.api(lambda c: c.containers.get(name).stop(timeout=5))

        await asyncio.gather(*(stop(c) for c in await self._idle.running_contexts(host)))
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
        egress network's gateway, for the proxies of this machine's hosts alone (every
        replica on the port they agreed on), and forwards to that one port
        (``model_relay.py``). The URL given back names the relay; the caller's allowlist and
        credentials follow it, so requests go through the proxy like any other."""
        relay = await relay_for(url, self.hosts)
        if start:
            await relay.start(self._work_dir / "model-relay.json")
            self._relays.append(relay)
            log.info("%s is reached through a relay at %s", url, relay.address)
        return relay.relayed(url)

    def paths(self, context: ExecutionContext) -> SandboxPaths:
        return spec.PATHS

    def files(self, context: ExecutionContext) -> ContextFiles:
        """The daemon's directories (bind mounts), or a host's volumes (``placed_files``)."""
        return files_for(context, self._hosts, self._busy, self._prepare_for_files)

    async def _prepare_for_files(self, context: ExecutionContext) -> None:
        state = self._contexts.setdefault(context.id, ContextState())
        async with state.lock:  # a task's own preparation (its route, its allowlist) wins
            if not state.busy:
                await self._prepare(context, state)

    # -- tasks ----------------------------------------------------------------------------

    async def start(
        self,
        context: ExecutionContext,
        argv: Sequence[str],
        env: Mapping[str, str],
        stdin_data: bytes = b"",
        *,
        keep_stdin: bool = False,
    ) -> SandboxProcess:
        if not _CONTEXT_ID.match(context.id):
            raise ValueError(f"execution-context id {context.id!r} cannot name a container")
        if context.id in self._foreign:
            raise SandboxUnavailable(
                f"container {spec.container_name(context.id)} was not made by this daemon's "
                "state; it was left alone. Remove it (podman rm -f) to let this task run."
            )
        state = self._contexts.setdefault(context.id, ContextState())
        began = time.monotonic()
        async with state.lock:
            state.busy = True
            try:
                host, name = await self._prepare(context, state)
            except SandboxUnavailable:
                state.busy = False
                raise
            except Exception as exc:
                state.busy = False
                state.known = None  # the next try asks podman afresh
                raise SandboxPreparationFailed(
                    f"preparing {spec.container_name(context.id)} failed: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            except BaseException:
                state.busy = False
                raise
        exec_env = {**context.env, **env}
        # Credentials stay with the egress proxy, which adds them for their host only.
        exec_env.update({c.env_name: c.placeholder for c in context.credentials})
        run_mark = secrets.token_hex(16)  # tells this exec's process apart (``end_others``)
        exec_env[RUN_MARK] = run_mark
        env_file: Path | None = None
        spawned = time.monotonic()

        async def after_exit(code: int, killed: bool) -> str:
            log.debug("%s: exec ran %.0f ms", name, (time.monotonic() - spawned) * 1000)
            if env_file is not None:
                self._env_files.remove(env_file)
            return await container_lifecycle.after_exit(
                host, context.id, state, code, killed, self._settings.userns_host_uid
            )

        async def end_others() -> None:
            await host.calls.kill_strays(spec.container_name(context.id), keep_exec=run_mark)

        try:
            if host.service.base_url.startswith("unix://"):
                # The service on this machine runs the exec (``api_exec.py``: no CLI start-up).
                body = exec_body(argv, exec_env, spec.PATHS.workspace)
                for attempt in (1, 2):
                    try:
                        process: SandboxProcess = await start_api_exec(
                            host.service.socket, name, body, stdin_data=stdin_data,
                            keep_stdin=keep_stdin, after_exit=after_exit, end_others=end_others,
                            releases=self._releases,
                        )  # fmt: skip
                        break
                    except SandboxUnavailable:
                        if attempt == 2 or not await self._repair(host, context, state):
                            raise
                host.service.note_answer()
            else:
                env_file = await asyncio.to_thread(self._env_files.write, exec_env)
                # ``podman --remote exec -i`` for a host reached over ssh (no socket here to
                # hijack); the variables travel in a 0600 file (``exec_env.py``).
                command = [*await host.service.cli_prefix(), "exec", "-i"]
                command += ["--workdir", spec.PATHS.workspace, "--env-file", str(env_file)]
                command += [name, *argv]
                process = await start_cli_exec(
                    command, host.service.cli_env(), stdin_data, keep_stdin, after_exit, end_others
                )
        except ExecEnvError as exc:
            state.busy = False
            raise SandboxUnavailable(f"cannot start the agent: {exc}") from exc
        except BaseException:
            state.busy = False
            state.unswept = True  # podman may have started it before the failure
            if env_file is not None:
                self._env_files.remove(env_file)
            raise
        spawned = time.monotonic()
        log.debug("%s: ready for the exec in %.0f ms", name, (spawned - began) * 1000)
        return process

    async def _repair(
        self, host: PodmanHost, context: ExecutionContext, state: ContextState
    ) -> bool:
        """After a failed exec: when the service stopped answering, or the container taken
        for running without asking podman (``ContextState.known``) died since, prepare
        again in full (the service started, the container started or recreated, whatever
        the failed start left cleared) and say True, for one more try."""
        known = state.known
        if await host.service.answers() and (known is None or strays.still_running(known.init)):
            return False
        log.info("%s: its container or service went away before its exec", context.id)
        state.known, state.unswept = None, True
        async with state.lock:
            await self._prepare(context, state)
        return True

    def _host_of(self, context_id: str) -> PodmanHost | None:
        return self._hosts.host_of(context_id)

    def _busy(self, context_id: str) -> bool:
        state = self._contexts.get(context_id)
        return state is not None and state.busy

    async def _prepare(
        self, context: ExecutionContext, state: ContextState
    ) -> tuple[PodmanHost, str]:
        """Everything a task needs, made or repaired: image, network, proxy and its route,
        and a running container on the current image, on the context's host. Returns the
        host and the container's name."""
        name = spec.container_name(context.id)
        host = await self._hosts.place(context.id, self._busy)
        await host.service.ensure_running()
        image = await host.images.agent_image(context.containerfile)
        network = self._networks.get(context.id)
        if network is None:  # made once; kept until ``discard`` removes it
            network = await spec.ensure_network(host.service, self.deployment, context.id)
            self._networks[context.id] = network
        others_busy = any(
            s.busy and self._host_of(c) is host
            for c, s in self._contexts.items()
            if c != context.id
        )
        route = self._egress.route(host, context, network, may_recreate=not others_busy)
        container = ensure_container(
            host, context, state, image, network, self.deployment, self._settings
        )
        if await asyncio.to_thread(host.proxy.ca_certificate.is_file):
            # The proxy's route and the container at once (issue 33: a new conversation's
            # first turn waited for each in turn); nothing runs in the container before the
            # task's process, which starts once both are done. The proxy's first start makes
            # the CA the container mounts: then one after the other.
            both = [asyncio.ensure_future(route), asyncio.ensure_future(container)]
            try:
                started = (await asyncio.gather(*both))[1]
            except BaseException:  # the first failure as it is (not a group); the other ends
                for step in both:
                    step.cancel()
                await asyncio.gather(*both, return_exceptions=True)
                raise
        else:
            await route
            started = await container
        if started:
            await self._idle.enforce_cap(host, keep=context.id)
        elif state.unswept:
            await host.calls.kill_strays(name)  # what an unfinished task may have left
        state.unswept = False
        return host, name

    # -- housekeeping and garbage collection ----------------------------------------------

    async def stop_idle(self) -> None:
        """Stop containers unused for ``idle_stop_minutes``; then enforce each host's cap."""
        for host in self.hosts:
            await self._idle.stop_idle(host)

    async def discard(self, context_id: str) -> None:
        """On the context's host; HostUnreachable while that host does not answer (the
        collection is tried again later), nothing at all for a context never placed."""
        if context_id in self._foreign:
            return
        host = await self._hosts.located(context_id)
        if host is None:
            self._contexts.pop(context_id, None)
            return
        state = self._contexts.pop(context_id, None) or ContextState()
        self._networks.pop(context_id, None)
        async with state.lock:
            await host.service.ensure_running()
            await remove_context(host, context_id)
            await self._placements.drop(context_id)
            log.info("discarded the container of %s and its network on %s", context_id, host.name)
