"""Each host's egress proxy wired to the sandbox's contexts: its ask listener (the socket
through which that proxy asks about a held request), the route of a context's network
through it (allowlist, credentials, the server's ask rules), and the networks it serves.

Split from ``sandbox.py``: one host's proxy is shared by every context placed there, so
what a task needs of it (ensure it runs, route this context) is per host, not per task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from gateway_bot.config.sandbox import SandboxSettings
from gateway_bot.sandbox.base import ExecutionContext
from gateway_bot.sandbox.egress.held import EgressAsk
from gateway_bot.sandbox.egress.rules import ASK, EgressRule
from gateway_bot.sandbox.podman import containers as spec
from gateway_bot.sandbox.podman.asks_forward import AsksForward
from gateway_bot.sandbox.podman.egress_asks import EgressAskListener
from gateway_bot.sandbox.podman.hosts import PodmanHost
from gateway_bot.sandbox.podman.proxy import LABEL_CONTEXT, LABEL_DEPLOYMENT, LABEL_ROLE

log = logging.getLogger(__name__)


class EgressWiring:
    def __init__(
        self,
        settings: SandboxSettings,
        hosts: list[PodmanHost],
        deployment: str,
        knows_context: Callable[[str], bool],
        host_of: Callable[[str], PodmanHost | None],
    ) -> None:
        approvals = settings.egress_approvals
        self._deployment = deployment
        self._host_of = host_of
        self._ask_rules = tuple(
            EgressRule(r.host, tuple(r.paths), tuple(r.methods), tuple(r.ports), action=ASK)
            for r in approvals.ask
        )
        self.listeners = {
            host.name: EgressAskListener(host.proxy.directory, knows_context, approvals.timeout_s)
            for host in hosts
        }
        """Each host's proxy asks through a socket in its own shared directory."""
        self.forwards = {
            host.name: AsksForward(host.service, host.proxy.volume, self.listeners[host.name].path)
            for host in hosts
            if host.proxy.volume is not None
        }
        """A host without our disk reaches that socket through a reverse forward."""

    def set_ask(self, ask: EgressAsk | None) -> None:
        for listener in self.listeners.values():
            listener.ask = ask

    async def start(self, host: PodmanHost) -> None:
        await self.listeners[host.name].start()

    async def close(self) -> None:
        for listener in self.listeners.values():
            await listener.close()
        for forward in self.forwards.values():
            await forward.close()

    async def route(
        self,
        host: PodmanHost,
        context: ExecutionContext,
        network: spec.ContextNetwork,
        *,
        may_recreate: bool,
    ) -> None:
        """The host's proxy runs, serves the context's network, and routes it with the
        context's allowlist and credentials (the repo's asks add to the server's)."""
        await host.proxy.ensure([(network.name, network.proxy_address)], may_recreate=may_recreate)
        asks = self.listeners[host.name]
        await asks.start()
        if host.name in self.forwards:
            await self.forwards[host.name].ensure()
        await host.proxy.set_route(
            network.agent_address,
            context.id,
            (*context.allowlist, *self._ask_rules),
            context.credentials,
            asks.timeout_s,
            listen=network.proxy_address,
        )
        if context.network_log is not None and host.proxy.volume is None:
            await asyncio.to_thread(_link, context.network_log, host.proxy.log_path(context.id))

    async def networks(self, host: PodmanHost) -> dict[str, spec.ContextNetwork]:
        """The context networks of the contexts on ``host``, by context id (hosts that
        share network definitions, as on one test machine, list each other's too: those
        are skipped)."""
        filters = {"label": f"{LABEL_DEPLOYMENT}={self._deployment}"}
        found = await host.service.api(
            lambda c: [dict(n.attrs) for n in c.networks.list(filters=filters)]
        )
        networks = {}
        for attrs in found:  # the listing describes each: no call per network
            labels = attrs.get("labels") or {}
            if labels.get(LABEL_ROLE) != "network" or not attrs.get("subnets"):
                continue
            if self._host_of(labels[LABEL_CONTEXT]) is host:
                networks[labels[LABEL_CONTEXT]] = spec.network_of(str(attrs["name"]), attrs)
        return networks


def _link(link: Path, target: Path) -> None:
    """``network.log`` beside the context's other files points at the proxy's log of it."""
    if link.is_symlink() and link.readlink() == target:
        return
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(target)
