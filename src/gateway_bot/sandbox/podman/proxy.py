"""The egress proxy: one mitmproxy container per deployment, shared by every conversation.

Chosen over a proxy per conversation (about 75 MB and a second container start each): the
proxy joins each conversation's internal network at a fixed address (.2; the agent is .3),
and tells conversations apart by the source address of a connection. ``routes.json`` in the
shared directory maps each agent address to its context id and allowlist; the daemon is its
only writer and replaces it atomically, the addon re-reads it when it changes.

The proxy's own way out is ``sandbox.egress_network``, a normal podman network. The
conversation networks are internal, without DNS and without a route anywhere else, so the
proxy is the only way out whatever the agent does with its environment variables.

A route also carries the context's injected credentials (the model API key): the agent
holds a placeholder, the proxy sets the real header on requests to the model API only. So
``routes.json`` is mode 0600, and the shared directory is mounted read-only into the proxy
(routes, credentials, the CA and its key): a compromised proxy cannot rewrite its own
rules or swap the CA the agents trust. Only ``logs/`` is writable there. The CA is made
once, before the first start, by mitmproxy's own code in a one-off container
(``proxy_directory``); ``routes.json`` is read and edited by ``proxy_routes``. On a host
that does not share the daemon's disk the same files are two volumes there, reached through
its API (``proxy_volume``, decision 0130).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podman.errors import NotFound, PodmanError

from gateway_bot.sandbox import shared_lock
from gateway_bot.sandbox.base import InjectedCredential, SandboxUnavailable
from gateway_bot.sandbox.egress.rules import ASK, EgressRule, HeaderInjection, rules_to_json
from gateway_bot.sandbox.podman import proxy_directory, strays
from gateway_bot.sandbox.podman.images import ImageBuilder
from gateway_bot.sandbox.podman.proxy_routes import RoutesFile
from gateway_bot.sandbox.podman.proxy_volume import ProxyVolume
from gateway_bot.sandbox.podman.service import API_ERRORS, PodmanService, api_error_text
from gateway_bot.sandbox.podman.strays import ProcessIdentity

log = logging.getLogger(__name__)

PROXY_PORT = 8080
NONLOCAL_BIND = {"net.ipv4.ip_nonlocal_bind": "1"}
"""A context's listener may be bound before its network is attached (a proxy restarted with
its routes): it then accepts as soon as the address is there."""
LABEL_DEPLOYMENT = "gateway-bot.deployment"
LABEL_ROLE = "gateway-bot.role"
LABEL_CONTEXT = "gateway-bot.context"
_MOUNT = "/egress"
LOGS = f"{_MOUNT}/logs"
"""The one place the proxy writes: the per-context network logs and its ready mark."""


@dataclass(frozen=True)
class _KnownProxy:
    image_id: str
    process: ProcessIdentity
    networks: frozenset[str]


class EgressProxy:
    def __init__(
        self,
        service: PodmanService,
        images: ImageBuilder,
        deployment: str,
        egress_network: str,
        directory: Path,
    ) -> None:
        self._service = service
        self._images = images
        self._deployment = deployment
        self._egress_network = egress_network
        self.directory = directory
        self.name = f"gwb-proxy-{deployment}"
        self._lock = asyncio.Lock()
        self._routes = RoutesFile(self.directory)
        self._known: _KnownProxy | None = None
        self.volume: ProxyVolume | None = None
        """Set for a host that does not share the daemon's disk (``use_volume``)."""

    def use_volume(self) -> None:
        """The host does not see ``directory``: the proxy's files are volumes there
        (``proxy_volume``); ``directory`` keeps the daemon's locks and copies."""
        self.volume = ProxyVolume(self._service, self._deployment, self.name, self.directory)
        self._routes.volume = self.volume

    @property
    def ca_certificate(self) -> Path:
        """mitmproxy's CA (made on its first start): agents trust it, so HTTPS can be checked
        request by request."""
        return self.directory / "ca" / "mitmproxy-ca-cert.pem"

    def log_path(self, context_id: str) -> Path:
        return self.directory / "logs" / f"{context_id}.log"

    @property
    def routes_path(self) -> Path:
        return self.directory / "routes.json"

    async def ensure(
        self, networks: Iterable[tuple[str, str]], *, may_recreate: bool = True
    ) -> None:
        """The proxy runs and is on every ``(network, address)``. A new proxy image replaces
        the container only when ``may_recreate`` (no other context is mid-task: replacing it
        would cut their connections) or it is stopped anyway; otherwise the next quiet moment
        does it."""
        async with self._lock:
            image = await self._images.proxy_image()
            wanted = [network for network, _ in networks]
            known = self._known
            if (
                known is not None
                and known.image_id == image.id
                and set(wanted) <= known.networks
                and strays.still_running(known.process)  # the very process seen, running
            ):
                return
            self._known = None
            async with self.shared_turn():
                await self._repair(image.id, image.tag, networks, may_recreate=may_recreate)

    @contextlib.asynccontextmanager
    async def shared_turn(self) -> AsyncIterator[None]:
        """This process's turn at the host's proxy, after every other replica's that shares
        its directory (``proxy.lock``, a ``flock``): creating, starting, recreating the
        container and making its CA are each one replica's at a time. Replicas started
        together on an empty deployment otherwise all found no proxy and all created one
        ("the container name ... is already in use" for all but the first) and wrote the CA
        into one directory at once."""
        async with shared_lock.held(self.directory / "proxy.lock"):
            yield

    async def _repair(
        self,
        image_id: str,
        image_tag: str,
        networks: Iterable[tuple[str, str]],
        *,
        may_recreate: bool,
    ) -> None:
        """Inspect, then create, recreate, start and attach what is missing (under
        ``shared_turn``: what another replica did meanwhile is seen here)."""
        wanted = [network for network, _ in networks]
        info = await self._inspect()
        stopped = info is not None and not info["State"]["Running"]
        if info is not None and info.get("Image") != image_id and (may_recreate or stopped):
            log.info("egress proxy: new image %s, recreating %s", image_tag, self.name)
            await self._service.remove_container(self.name)
            info = None
        if info is None:
            await self._create(image_tag)
        if info is None or not info["State"]["Running"]:
            await self._start()
            info = await self._inspect()
        assert info is not None
        attached = set((info.get("NetworkSettings") or {}).get("Networks") or {})
        for network, address in networks:
            if network not in attached:
                await self.connect(network, address)
        self._learn(info, attached | set(wanted))

    def _learn(self, info: dict[str, Any], networks: set[str]) -> None:
        """Remember the running proxy (only on this machine, whose /proc holds its process):
        while that process runs, on the image and networks seen, ``ensure`` asks podman
        nothing (every task calls it; a proxy that died, was restarted by podman or
        replaced has another process or none, and is then inspected and repaired)."""
        pid = (info.get("State") or {}).get("Pid")
        identity = strays.init_identity(int(pid)) if pid and self._service.is_local else None
        if identity is not None and info.get("Image"):
            self._known = _KnownProxy(str(info["Image"]), identity, frozenset(networks))

    async def stop(self) -> None:
        """Stop (not remove) the proxy; the next ``ensure`` starts it again."""
        async with self._lock, self.shared_turn():
            self._known = None

            def call(client: Any) -> None:
                with contextlib.suppress(NotFound):
                    container = client.containers.get(self.name)
                    if container.attrs["State"]["Running"]:
                        container.stop(timeout=5)

            await self._service.api(call)

    async def egress_gateway(self) -> str:
        """The host's own address on the egress network (the gateway of its bridge; the
        network is made if missing): where a host-side relay the proxy may reach listens."""
        await self._ensure_egress_network()
        attrs = await self._service.api(lambda c: dict(c.networks.get(self._egress_network).attrs))
        gateways = [str(s["gateway"]) for s in attrs.get("subnets") or [] if s.get("gateway")]
        if not gateways:
            raise SandboxUnavailable(
                f"the egress network {self._egress_network} has no gateway address for a "
                "relay to the host to listen on"
            )
        return next((g for g in gateways if ":" not in g), gateways[0])

    async def egress_address(self) -> str | None:
        """The proxy's own address on the egress network, None while it is not running:
        the only peer a relay on that network's gateway accepts."""
        info = await self._inspect()
        if info is None or not info["State"]["Running"]:
            return None
        networks = (info.get("NetworkSettings") or {}).get("Networks") or {}
        return (networks.get(self._egress_network) or {}).get("IPAddress") or None

    async def connect(self, network: str, address: str) -> None:
        def call(client: Any) -> None:
            body = {"container": self.name, "static_ips": [address]}
            # podman-py's Network.connect sends the Docker-shaped body, whose address the
            # libpod endpoint ignores; this is the libpod shape, through podman-py's client.
            response = client.api.post(
                f"/networks/{network}/connect",
                data=json.dumps(body),
                headers={"Content-Type": "application/json"},
            )
            if response.status_code >= 400 and "already" not in response.text:
                raise SandboxUnavailable(
                    f"could not attach the egress proxy to {network}: {response.text.strip()}"
                )

        await self._service.api(call)

    async def disconnect(self, network: str) -> None:
        """Under ``ensure``'s lock: an ``ensure`` running meanwhile inspected the proxy while
        it was still on ``network``, and would remember it as served when done (a resumed
        conversation's new network of that name was then never attached: its agent cut off
        for as long as the proxy ran)."""

        def call(client: Any) -> None:
            with contextlib.suppress(NotFound, PodmanError):
                client.networks.get(network).disconnect(self.name, force=True)

        async with self._lock:
            self._known = None
            await self._service.api(call)

    async def set_route(
        self,
        source: str,
        context_id: str,
        rules: Sequence[EgressRule],
        credentials: Sequence[InjectedCredential] = (),
        ask_timeout_s: float = 600.0,
        listen: str | None = None,
    ) -> None:
        """Requests from ``source`` belong to ``context_id`` and follow ``rules``; those to a
        credential's host get its header. A request held by an ask rule waits at most
        ``ask_timeout_s`` (and a grace) for the daemon's answer. ``listen`` is the proxy's
        own address on the context's network: it gets a listener of its own there (a
        flood of connections fills that listener's queue, not the other contexts'), and
        this returns once it listens."""
        inject = [
            HeaderInjection(c.scheme, c.host, c.port, c.header, c.value).to_json()
            for c in credentials
        ]
        entry = {
            "context": context_id,
            # Ask rules apart: a proxy still on an older addon (kept while other tasks run)
            # ignores the key, where in "rules" it would take them for allow rules.
            "rules": rules_to_json(r for r in rules if r.action != ASK),
            "ask": rules_to_json(r for r in rules if r.action == ASK),
            "inject": inject,
            "ask_timeout_s": ask_timeout_s,
        }
        if listen is not None:
            entry["listen"] = listen
        # A route the file already holds is not rewritten (a rewrite makes the proxy re-read
        # every route): every task but a context's first. The file is read each time, never
        # a copy kept here: replicas sharing this host's proxy edit it too.
        if (await self._routes.read()).get(source) != entry:
            await self._routes.edit(lambda sources: sources.__setitem__(source, entry))
        if listen is not None:
            await self._routes.wait_listening(listen)

    async def drop_routes(self, context_id: str) -> None:
        def drop(sources: dict[str, Any]) -> None:
            for source in [s for s, e in sources.items() if e.get("context") == context_id]:
                del sources[source]

        await self._routes.edit(drop)
        if self.volume is not None:
            await self.volume.drop_log(context_id)
        else:
            await asyncio.to_thread(self.log_path(context_id).unlink, True)

    async def _inspect(self) -> dict[str, Any] | None:
        def call(client: Any) -> dict[str, Any] | None:
            try:
                return dict(client.containers.get(self.name).attrs)
            except NotFound:
                return None

        return await self._service.api(call)

    async def _create(self, image: str) -> None:
        labels = {LABEL_DEPLOYMENT: self._deployment, LABEL_ROLE: "proxy"}
        if self.volume is not None:
            await asyncio.to_thread(self.directory.mkdir, parents=True, exist_ok=True)
            routes = await self._routes.content()
            upstream_ca = await self.volume.prepare(labels, image, routes)
        else:
            upstream_ca = await asyncio.to_thread(proxy_directory.prepare, self.directory)
            await proxy_directory.ensure_ca(self._service, labels, self.directory, image)
        await self._ensure_egress_network()
        command = [
            # Loopback only at first; the addon adds a listener per context (``listen``).
            "--mode", f"regular@127.0.0.1:{PROXY_PORT}",
            "--set", f"confdir={_MOUNT}/ca",
            "--set", "connection_strategy=lazy",  # nothing is dialled before the verdict
            "--set", "stream_large_bodies=1m",  # a body the addon let through is never kept
            "--set", "flow_detail=0",
            "--set", "termlog_verbosity=warn",
        ]  # fmt: skip
        if upstream_ca:  # upstream servers are checked against what the host trusts
            command += ["--set", f"ssl_verify_upstream_trusted_ca={_MOUNT}/upstream-ca.pem"]

        def call(client: Any) -> None:
            client.containers.create(
                image,
                name=self.name,
                command=command,
                labels={LABEL_DEPLOYMENT: self._deployment, LABEL_ROLE: "proxy"},
                networks={self._egress_network: {}},
                **self._mounts(),
                runtime=self._service.runtime,
                ulimits=self._service.api_ulimits(),
                mem_limit="512m",
                sysctls=NONLOCAL_BIND,
                restart_policy={"Name": "on-failure"},
                stop_timeout=5,
            )

        try:
            await self._service.api(call)
        except API_ERRORS as exc:
            if await self._made_by_another_replica():
                return  # created meanwhile by a replica that shares no directory with this one
            raise SandboxUnavailable(
                f"could not create the egress proxy: {api_error_text(exc)}"
            ) from exc

    def _mounts(self) -> dict[str, Any]:
        if self.volume is not None:
            return {"volumes": self.volume.volumes()}
        directory = str(self.directory)
        return {
            "mounts": [
                {"type": "bind", "source": directory, "target": _MOUNT, "read_only": True},
                {"type": "bind", "source": str(self.directory / "logs"), "target": LOGS},
            ]
        }

    async def _made_by_another_replica(self) -> bool:
        """After a refused create: is a container of this name there now, labelled as this
        deployment's proxy? Then it is used as found (the next ``ensure`` repairs its image
        or networks). A container of that name that is not ours is never adopted."""
        info = await self._inspect()
        labels = ((info or {}).get("Config") or {}).get("Labels") or {}
        ours = (labels.get(LABEL_DEPLOYMENT), labels.get(LABEL_ROLE)) == (self._deployment, "proxy")
        if info is not None and not ours:
            log.warning("egress proxy: %s exists and is not this deployment's", self.name)
        return ours

    async def _start(self) -> None:
        ready = self.directory / "logs" / "ready"
        if self.volume is not None:
            await self.volume.mark_starting()
        else:
            ready.unlink(missing_ok=True)
        try:
            await self._service.start_container(self.name)
        except API_ERRORS as exc:
            raise SandboxUnavailable(
                f"the egress proxy did not start: {api_error_text(exc)}"
            ) from exc
        deadline = time.monotonic() + 60
        while not (await self.volume.ready() if self.volume else ready.exists()):
            info = await self._inspect()
            if time.monotonic() > deadline or info is None or not info["State"]["Running"]:
                logs = await self._service.cli("logs", "--tail", "5", self.name, check=False)
                raise SandboxUnavailable(
                    f"the egress proxy is not listening: {(logs.stdout + logs.stderr).strip()}"
                )
            await asyncio.sleep(0.1)

    async def _ensure_egress_network(self) -> None:
        """Made when missing; one made meanwhile by another replica (each looks when it
        starts its relay) is as good as one made here."""

        def call(client: Any) -> None:
            if client.networks.exists(self._egress_network):
                return
            try:
                client.networks.create(self._egress_network, driver="bridge")
            except API_ERRORS:
                if not client.networks.exists(self._egress_network):
                    raise

        await self._service.api(call)
