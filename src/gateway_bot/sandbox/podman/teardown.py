"""Taking a deployment's podman objects down (``gateway-bot down``): its agent containers and
its egress proxy stopped, or with ``remove`` removed together with its per-context networks.

Containers outlive ``run`` on purpose (a restart takes them over:
docs/decisions/0020-container-per-conversation.md); only ``chat`` stops its own when it
ends. What is this deployment's is what carries its ``gateway-bot.deployment`` label,
matched exactly, and one of its roles (agent, proxy, network): another deployment's objects
on the same podman, a person's own containers and the shared egress network are never
touched.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from podman.errors import NotFound

from gateway_bot.sandbox.podman.hosts import PodmanHost
from gateway_bot.sandbox.podman.proxy import LABEL_DEPLOYMENT, LABEL_ROLE

log = logging.getLogger(__name__)

CONTAINER_ROLES = ("agent", "proxy")
STOP_TIMEOUT_S = 5
"""The agent's init and mitmproxy end on SIGTERM at once; a hung one is killed after this."""


@dataclass(frozen=True)
class TakenDown:
    """One object ``down`` acted on: what it is, its name, what was done."""

    kind: str
    """"agent container", "egress proxy" or "network"."""
    name: str
    done: str
    """"stopped", "removed" or "already stopped"."""


def _ours(attrs: dict[str, Any], deployment: str, roles: tuple[str, ...]) -> bool:
    labels = attrs.get("Labels") or attrs.get("labels") or {}  # a network's are lower case
    return labels.get(LABEL_DEPLOYMENT) == deployment and labels.get(LABEL_ROLE) in roles


async def take_down(host: PodmanHost, deployment: str, *, remove: bool) -> list[TakenDown]:
    """Stop (``remove``: remove) ``deployment``'s containers on ``host``, then with ``remove``
    its networks; what was done, in order. The local service is started for this when
    nothing answers, and stopped again afterwards."""
    service = host.service
    await service.ensure_running()
    try:
        return await _take_down(host, deployment, remove=remove)
    finally:
        await service.stop_if_started_here()


async def _take_down(host: PodmanHost, deployment: str, *, remove: bool) -> list[TakenDown]:
    service = host.service
    wanted = {"label": f"{LABEL_DEPLOYMENT}={deployment}"}  # one label: podman-py's limit

    def list_containers(client: Any) -> list[dict[str, Any]]:
        found = client.containers.list(all=True, filters=wanted)
        return [dict(c.attrs) for c in found if _ours(c.attrs, deployment, CONTAINER_ROLES)]

    done: list[TakenDown] = []
    # Agents first: the proxy goes last, as the daemon stops them.
    listed = sorted(await service.api(list_containers), key=lambda a: a["Labels"][LABEL_ROLE])
    for attrs in listed:
        name = attrs["Names"][0]
        kind = "egress proxy" if attrs["Labels"][LABEL_ROLE] == "proxy" else "agent container"
        if remove:
            await service.remove_container(name)
            done.append(TakenDown(kind, name, "removed"))
            continue
        if attrs.get("State") != "running":
            done.append(TakenDown(kind, name, "already stopped"))
            continue

        def stop(client: Any, name: str = name) -> None:
            with contextlib.suppress(NotFound):
                client.containers.get(name).stop(timeout=STOP_TIMEOUT_S)

        await service.api(stop)
        done.append(TakenDown(kind, name, "stopped"))
    if remove:
        done += await _remove_networks(host, deployment)
    return done


async def _remove_networks(host: PodmanHost, deployment: str) -> list[TakenDown]:
    wanted = {"label": f"{LABEL_DEPLOYMENT}={deployment}"}

    def list_networks(client: Any) -> list[str]:
        found = client.networks.list(filters=wanted)
        return [n.name for n in found if _ours(n.attrs, deployment, ("network",))]

    done = []
    for name in await host.service.api(list_networks):

        def remove(client: Any, name: str = name) -> None:
            with contextlib.suppress(NotFound):
                client.networks.get(name).remove(force=True)

        await host.service.api(remove)
        done.append(TakenDown("network", name, "removed"))
    return done
