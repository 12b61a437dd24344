"""Taking over one host's containers at start-up, after a clean stop or a kill -9: this
deployment's containers are listed by label (state lives in podman, not in files of ours)
and each is adopted, never recreated nor stopped. A running one has whatever the dead
daemon's agent left running in it ended; one of a context the state does not know is
reported and left alone (``foreign``); with several hosts, one placed elsewhere too.

Split from ``sandbox.py``, whose ``open`` calls it for each host. Its cost is the restart's
time to the first answer, so it is one listing of containers, one of networks and one sweep
of /proc for all running containers, never a podman call per container (50 inspects and
50 sweeps took seconds on a loaded machine).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gateway_bot.sandbox.base import IsKnown
from gateway_bot.sandbox.podman import container_lifecycle
from gateway_bot.sandbox.podman.containers import ContextNetwork
from gateway_bot.sandbox.podman.egress_wiring import EgressWiring
from gateway_bot.sandbox.podman.host_set import HostSet
from gateway_bot.sandbox.podman.hosts import PodmanHost
from gateway_bot.sandbox.podman.idle_stops import ContextState
from gateway_bot.sandbox.podman.proxy import LABEL_CONTEXT

log = logging.getLogger(__name__)


async def reattach_host(
    host: PodmanHost,
    hosts: HostSet,
    is_known: IsKnown,
    contexts: dict[str, ContextState],
    foreign: set[str],
    egress: EgressWiring,
    userns_host_uid: int | None = None,
) -> dict[str, ContextNetwork]:
    """Each running container's listing entry is kept (``container_lifecycle.learn``), and
    the networks of their contexts returned (by context id, from one listing): the first
    task after the restart then asks podman nothing before its exec."""
    await host.service.ensure_running()
    placements = hosts.placements
    running: list[dict[str, Any]] = []
    for info in await host.calls.our_containers():
        name, context_id = info["Names"][0], info["Labels"][LABEL_CONTEXT]
        placed = placements.get(context_id)
        if hosts.several and placed is not None and placed != host.name:
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
            foreign.add(context_id)
            continue
        contexts.setdefault(context_id, ContextState())
        if hosts.several and placed is None:
            await placements.set(context_id, host.name)
        if info["State"] == "running":
            running.append(info)
        else:
            log.info("container %s is %s; its next task starts it", name, info["State"])
    if not running:
        return {}
    # What the dead daemon's agents left running ends before any task runs again (``open``
    # returns after this): a re-run never meets its killed predecessor.
    await host.calls.kill_strays_in_all(running)
    if host.service.is_local:  # 50 containers' inits read in /proc: off the event loop
        known = await asyncio.to_thread(
            lambda: [
                container_lifecycle.known_from(info, userns_host_uid, not host.shares_state_dir)
                for info in running
            ]
        )
        for info, learned in zip(running, known, strict=True):
            contexts[info["Labels"][LABEL_CONTEXT]].known = learned
    for info in running:
        log.info("reattached to running container %s on %s", info["Names"][0], host.name)
    networks = await egress.networks(host)
    await host.proxy.ensure([(n.name, n.proxy_address) for n in networks.values()])
    return networks
