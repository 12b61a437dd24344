"""The held requests' socket of an ``ssh://`` host that does not share the daemon's disk
(decision 0130): the proxy there asks on ``/egress/asks.sock`` as everywhere, and that
socket is a reverse forward (``ssh -R``) of the daemon's own ask socket
(``egress_asks.EgressAskListener``), made by the host's sshd in the egress volume's
directory on the host (the proxy sees the volume read-only: connecting needs no write).
The daemon stays the decider: the forward only carries the proxy's one line and the
daemon's answer, and without it the proxy refuses what it holds.

A second ssh client, not a ``-R`` in the API's own connection: OpenSSH's server leaves a
forwarded socket behind when a connection ends and will not bind over it unless its own
``StreamLocalBindUnlink`` is set, so the stale one is removed first (a helper container
with the volume), which needs the API up; and a forward that failed in the API's
connection (``ExitOnForwardFailure``) would make the whole host unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from pathlib import Path

from gateway_bot.sandbox.podman import container_archive as archive
from gateway_bot.sandbox.podman.proxy_volume import MOUNT, ProxyVolume
from gateway_bot.sandbox.podman.service import API_ERRORS, PodmanService
from gateway_bot.sandbox.podman.ssh_tunnel import end_client, start_client

log = logging.getLogger(__name__)

SOCKET = "asks.sock"
READY_WAIT_S = 20.0


class AsksForward:
    def __init__(self, service: PodmanService, volume: ProxyVolume, local: Path) -> None:
        self._service = service
        self._volume = volume
        self._local = local
        self._process: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()

    async def ensure(self) -> None:
        """The forward runs (made again when its client ended). A failure is logged, not
        raised: the task runs, and what the proxy holds meanwhile is refused."""
        tunnel = self._service.tunnel
        if tunnel is None:
            return
        async with self._lock:
            if self._process is not None and self._process.returncode is None:
                return
            await self._end()
            try:
                mountpoint = await self._volume.mountpoint()
            except API_ERRORS as exc:
                log.warning("no held requests' forward to %s: %s", self._service.host, exc)
                return
            await self._volume.remove_socket(SOCKET)
            # ssh connects to the daemon's socket by path: a short link beside the API's
            # forwarded socket (a unix socket's path must fit in 108 bytes).
            link = tunnel.socket.parent / SOCKET
            await asyncio.to_thread(_relink, link, self._local)
            self._process = await start_client(tunnel.reverse_argv(f"{mountpoint}/{SOCKET}", link))
            deadline = time.monotonic() + READY_WAIT_S
            while time.monotonic() < deadline and self._process.returncode is None:
                if await archive.exists(self._service, self._volume.proxy, f"{MOUNT}/{SOCKET}"):
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._process.wait(), 0.1)
            await self._end()
            log.warning("the held requests' forward to %s is not up", self._service.host)

    async def _end(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if words := await end_client(process):
            log.warning("held requests' forward ended: %s", words)

    async def close(self) -> None:
        async with self._lock:
            await self._end()


def _relink(link: Path, target: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(link)
    os.symlink(target, link)
