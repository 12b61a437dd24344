"""The egress proxy's ``routes.json`` on the daemon's side: read, edited one change at a time
(in this process and across replicas sharing the directory), replaced atomically so the
addon re-reads it; and the wait until the addon listens where a route asked it to.

Split from ``proxy.py``, which decides what a route holds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway_bot.sandbox import shared_lock

if TYPE_CHECKING:
    from gateway_bot.sandbox.podman.proxy_volume import ProxyVolume

log = logging.getLogger(__name__)

LISTENING = "listening.json"
"""Written by the addon in logs/: the addresses it listens on."""
LISTEN_WAIT_S = 10


class RoutesFile:
    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._path = directory / "routes.json"
        self._lock = asyncio.Lock()
        self.volume: ProxyVolume | None = None
        """A host that does not share the directory: each edit is put into its volume."""

    async def edit(self, change: Callable[[dict[str, Any]], None]) -> None:
        """Read, change, replace: one edit at a time, in this process and across the
        replicas sharing the directory (``shared_lock``), or an edit made from a read older
        than another's drops that one's routes."""
        async with self._lock, shared_lock.held(self._directory / "routes.lock"):
            written = await asyncio.to_thread(self._rewrite, change)
            if self.volume is not None:
                await self.volume.put_routes(written)

    async def content(self) -> bytes:
        """The file as the daemon has it (empty routes when there is none)."""
        sources = await self.read()
        return json.dumps({"sources": sources}, indent=1, sort_keys=True).encode()

    async def read(self) -> dict[str, Any]:
        return await asyncio.to_thread(self._read)

    def _read(self) -> dict[str, Any]:
        try:
            sources = json.loads(self._path.read_text()).get("sources", {})
        except (OSError, ValueError, AttributeError):
            return {}
        return sources if isinstance(sources, dict) else {}

    def _rewrite(self, change: Callable[[dict[str, Any]], None]) -> bytes:
        path = self._path
        sources = self._read()
        change(sources)
        partial = path.with_suffix(".json.partial")
        partial.unlink(missing_ok=True)  # made afresh below: never through a stale link
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        descriptor = os.open(partial, flags, 0o600)  # credentials: the daemon's and the proxy's
        written = json.dumps({"sources": sources}, indent=1, sort_keys=True).encode()
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(written)
        os.replace(partial, path)  # a new inode: the addon notices and re-reads
        return written

    async def wait_listening(self, address: str) -> None:
        """Wait (at most ``LISTEN_WAIT_S``) until the addon says it listens on ``address``.
        A proxy on an addon older than per-context listeners writes no such file and
        listens everywhere: nothing to wait for."""
        listening = self._directory / "logs" / LISTENING
        deadline = time.monotonic() + LISTEN_WAIT_S
        while time.monotonic() < deadline:
            try:
                if self.volume is not None:
                    raw = await self.volume.listening()
                    if raw is None:
                        return
                else:
                    raw = await asyncio.to_thread(listening.read_bytes)
                addresses = json.loads(raw)
            except FileNotFoundError:
                return
            except (OSError, ValueError):
                addresses = []
            if not isinstance(addresses, list):
                addresses = []
            if address in addresses:
                return
            await asyncio.sleep(0.05)
        log.warning("egress proxy: not listening on %s after %s s", address, LISTEN_WAIT_S)
