"""gateway-bot's init on a host that does not share the daemon's disk (decision 0130): a
read-only volume of that host holding this machine's init binary, mounted in every agent
container there as ``containers.INIT_VOLUME_DIR``.

Not a file put into each container's own root: the agent is root in there and could
replace it, and the next start (after an idle stop, or the restart that ends a remote
container's strays) would run its program as PID 1, the take-over ``init.c`` exists to
prevent. The volume is mounted read-only and named by the binary's hash, so a new init is a
new volume (containers made before keep the one they have until recreated). It is filled
through a helper container (created, never started) by an archive PUT, and checked the
same way before each agent container's create, so a fill cut short is made good.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from pathlib import Path, PurePosixPath
from typing import Any

from gateway_bot.sandbox.base import SandboxUnavailable
from gateway_bot.sandbox.podman import container_archive as archive
from gateway_bot.sandbox.podman.containers import CA_IN_CONTAINER
from gateway_bot.sandbox.podman.proxy import LABEL_DEPLOYMENT, LABEL_ROLE
from gateway_bot.sandbox.podman.service import INIT_ON_HOST, PodmanService

log = logging.getLogger(__name__)


async def ensure_init_volume(service: PodmanService, deployment: str, image: str) -> str:
    """The name of the host's init volume, made and filled when needed. ``image`` (any
    image of the host: the agent's) only carries the helper container."""
    try:
        data = await asyncio.to_thread(INIT_ON_HOST.read_bytes)
    except OSError as exc:
        raise SandboxUnavailable(
            f"{INIT_ON_HOST} is missing ({exc.strerror}): gateway-bot's init is every agent "
            "container's PID 1. Build it with scripts/setup.sh."
        ) from exc
    volume = f"gwb-init-{hashlib.sha256(data).hexdigest()[:16]}"
    labels = {LABEL_DEPLOYMENT: deployment, LABEL_ROLE: "helper"}

    def create(client: Any) -> None:
        if not client.volumes.exists(volume):
            client.volumes.create(volume, labels={LABEL_ROLE: "init"})

    await service.api(create)
    async with archive.filling(service, volume, labels, lambda _: image, "gwb-init-fill") as helper:
        if not await archive.exists(service, helper, f"{archive.FILL_AT}/init"):
            log.info("filling the init volume %s on %s", volume, service.host)
            tar = archive.tar_of([archive.bytes_member("init", data, 0o555)])
            await archive.write(service, helper, archive.FILL_AT, tar)
    return volume


async def put_ca(service: PodmanService, container: str, certificate: Path) -> None:
    """The egress proxy's CA certificate (this machine's copy of it) into a created agent
    container, where a host that shares the disk bind-mounts it read-only. The agent can
    replace it there: that only breaks its own TLS through the proxy."""
    try:
        data = await asyncio.to_thread(certificate.read_bytes)
    except OSError as exc:
        raise SandboxUnavailable(f"the egress proxy's CA certificate: {exc.strerror}") from exc
    target = PurePosixPath(CA_IN_CONTAINER)
    tar = archive.tar_of(
        [archive.bytes_member(f"{target.parent.name}/{target.name}", data)], [target.parent.name]
    )
    await archive.write(service, container, str(target.parent.parent), tar)
