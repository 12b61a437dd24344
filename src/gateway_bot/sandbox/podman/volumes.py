"""A context's named volumes on a host that does not share the daemon's state directory
(decision 0130): its workspace, home, inbox, outbox and storage live there, and nowhere on
the daemon's side.

Made (labelled like the container, role ``volume``) before the container that mounts them;
podman would otherwise make them unlabelled on the container's create. Removed when the
context is discarded (``remove_context``), after its container: a volume a container still
uses cannot go. ``down --remove`` keeps them, as it keeps the conversations' directories.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from podman.errors import NotFound

from gateway_bot.sandbox.podman import containers as spec
from gateway_bot.sandbox.podman.hosts import PodmanHost
from gateway_bot.sandbox.podman.service import PodmanService

log = logging.getLogger(__name__)

ROLE = "volume"


async def ensure_volumes(service: PodmanService, deployment: str, context_id: str) -> None:
    """The context's volumes exist on the host (those there already are kept as they are:
    they hold the conversation)."""
    wanted = list(spec.context_volumes(context_id))
    labels = spec.labels(deployment, context_id, ROLE)

    def call(client: Any) -> None:
        for name in wanted:
            if not client.volumes.exists(name):
                client.volumes.create(name, labels=labels)

    await service.api(call)


async def remove_volumes(service: PodmanService, context_id: str) -> None:
    """The context's volumes go, with what they hold (a garbage-collected conversation)."""
    wanted = list(spec.context_volumes(context_id))

    def call(client: Any) -> None:
        for name in wanted:
            with contextlib.suppress(NotFound):
                client.volumes.remove(name, force=True)

    await service.api(call)
    log.info("removed the volumes of %s on %s", context_id, service.host)


async def remove_context(host: PodmanHost, context_id: str) -> None:
    """The context's container, its network (the proxy leaves it first), its routes and, on
    a host that does not share the state directory, its volumes: all of it on ``host``."""
    name, network = spec.container_name(context_id), spec.network_name(context_id)
    await host.calls.remove(name)
    await host.proxy.disconnect(network)

    def remove_network(client: Any) -> None:
        with contextlib.suppress(NotFound):
            client.networks.get(network).remove()

    await host.service.api(remove_network)
    await host.proxy.drop_routes(context_id)
    if not host.shares_state_dir:
        await remove_volumes(host.service, context_id)
