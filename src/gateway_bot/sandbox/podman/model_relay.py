"""A model API on this host's loopback, reached by the sandbox through the egress proxy.

Inside a container (the agent's, the proxy's) 127.0.0.1 is the container itself, so a local
Anthropic-compatible server (LiteLLM and the like on 127.0.0.1:PORT) is out of its reach.
The relay is a small TCP forwarder in the daemon's own process: it listens on the host's side
of the egress network (the network's gateway address), accepts connections from the egress
proxy's address on that network and from nothing else, and forwards each one to exactly one
loopback port. Agents are given the relay's address as their model API; the allowlist's
model rule and the injected credential follow that address, so an agent reaches the local
server only through its proxy, which adds the key there, as for a remote model API.

Bound with IP_FREEBIND: the network's bridge may appear only with its first container, after
the daemon started. Living in the daemon's process, the relay ends with it (also on kill -9):
nothing stays bound that the next start would trip over, and the next start binds afresh.

Several hosts on this machine (``sandbox.podman.hosts`` with ``unix://`` services) each have
their own proxy: the relay accepts every one of them (it listens on the first host's egress
gateway, an address of this machine that the other hosts' bridges route to), so a
conversation placed on any of them reaches the model API by the one URL the agents are
given. Before, it accepted the first host's proxy only: every conversation on a second host
got "502 Bad Gateway". Replicas sharing a ``state_dir`` agree on the port through
``model-relay.json`` (under its ``flock``) and all listen on it (``SO_REUSEPORT``: the kernel
hands each connection to one of them), so the URL, the allowlist's port and a conversation's
route are the same whichever replica runs it, and a replica that dies takes no relay away
from the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from gateway_bot.sandbox import shared_lock
from gateway_bot.sandbox.base import HostUnreachable, SandboxUnavailable

if TYPE_CHECKING:
    from gateway_bot.sandbox.podman.hosts import PodmanHost

log = logging.getLogger(__name__)

IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)
PEER_REFRESH_S = 1.0
"""Look the proxy's address up again at most this often: a connection from any other
address (another container on the egress network) must not make podman calls in a loop."""
_CHUNK = 65536

PeerLookup = Callable[[], Awaitable[Collection[str]]]
"""The addresses allowed to connect: the egress proxies' (one per host on this machine), on
their egress networks; empty while none runs."""


def loopback_target(url: str) -> tuple[str, int]:
    """The host and port a relay forwards to for ``url`` (a service on this host's
    loopback). Raises SandboxUnavailable where no relay on the host can help."""
    parts = urlsplit(url)
    if parts.hostname is None:
        raise SandboxUnavailable(f"{url} names no host")
    if os.geteuid() != 0:
        raise SandboxUnavailable(
            f"{url} is on this host's loopback, which rootless podman's containers cannot "
            "reach (their networks live in a namespace of their own, where no relay on the "
            "host can listen): use an address they can reach, rootful podman, or "
            "sandbox: {kind: none}"
        )
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise SandboxUnavailable(f"{url}: {exc}") from exc
    return parts.hostname, port


async def relay_for(url: str, hosts: Sequence[PodmanHost]) -> ModelRelay:
    """The relay (not started) through which the proxies of every host on this machine reach
    ``url``, a service on its loopback. A host on another machine cannot: said once here."""
    target = loopback_target(url)
    local = [host for host in hosts if host.service.is_local]
    if not local:
        raise SandboxUnavailable(
            f"{url} is on this machine's loopback, and no sandbox host runs here to relay it "
            "to: give the agents an address their hosts can reach"
        )
    for host in hosts:
        if not host.service.is_local:
            log.warning(
                "host %s is another machine: its conversations cannot reach %s on this "
                "machine's loopback (give them an address that host can reach)",
                host.name,
                url,
            )

    async def proxies() -> list[str]:
        """A host that does not answer has no proxy to let in; the others still do."""
        found = await asyncio.gather(
            *(host.proxy.egress_address() for host in local), return_exceptions=True
        )
        return [address for address in found if isinstance(address, str) and address]

    for host in local:  # the first that answers: the address is this machine's either way
        try:
            gateway = await host.proxy.egress_gateway()
        except HostUnreachable as exc:
            log.warning("%s: the model relay listens on another host's gateway", exc)
            continue
        return ModelRelay(gateway, *target, proxies)
    raise SandboxUnavailable(f"no sandbox host on this machine answers to relay {url} to")


class ModelRelay:
    """``listen_host:port`` -> ``target_host:target_port``, for connections from the addresses
    ``allowed_peers`` names. It listens on the port the replicas agreed on, else on the
    target's port number when that is free there (one number for people to read), on another
    free port else."""

    def __init__(
        self, listen_host: str, target_host: str, target_port: int, allowed_peers: PeerLookup
    ) -> None:
        self.listen_host = listen_host
        self.target = (target_host, target_port)
        self._allowed_peers = allowed_peers
        self._allowed: frozenset[str] = frozenset()
        self._looked_up_at = float("-inf")
        self._lookup_lock = asyncio.Lock()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()
        self.port = target_port
        """Where it listens once started; before that, where it will try first."""

    @property
    def address(self) -> str:
        """``host:port`` as a URL's authority (IPv6 in brackets)."""
        host = f"[{self.listen_host}]" if ":" in self.listen_host else self.listen_host
        return f"{host}:{self.port}"

    def relayed(self, url: str) -> str:
        """``url`` with the relay's address in place of the loopback one."""
        return urlunsplit(urlsplit(url)._replace(netloc=self.address))

    async def start(self, agreement: Path | None = None) -> None:
        """``agreement``: the file in which the replicas sharing a ``state_dir`` record the
        port they all listen on (read and written under its ``flock``)."""
        if agreement is None:
            sock = _listening_socket(self.listen_host, self.port)
        else:
            async with shared_lock.held(agreement.with_name(agreement.name + ".lock")):
                sock = await asyncio.to_thread(self._bind_agreed, agreement)
        self.port = sock.getsockname()[1]
        self._server = await asyncio.start_server(self._serve, sock=sock)
        log.info("model relay on %s for %s:%d (egress proxy only)", self.address, *self.target)

    def _bind_agreed(self, agreement: Path) -> socket.socket:
        """The port another replica recorded for this relay, shared; or, when none is
        recorded or it cannot be shared (another program took it since), a port of its own,
        recorded for the replicas that start after."""
        key = f"{self.address.rsplit(':', 1)[0]} -> {self.target[0]}:{self.target[1]}"
        try:
            agreed = json.loads(agreement.read_text())
        except (OSError, ValueError):
            agreed = {}
        agreed = agreed if isinstance(agreed, dict) else {}
        port = agreed.get(key)
        if isinstance(port, int) and 0 < port < 65536:
            try:
                return _listening_socket(self.listen_host, port, fallback=False)
            except OSError as exc:
                log.info("model relay: the agreed port %d cannot be shared (%s)", port, exc)
        sock = _listening_socket(self.listen_host, self.port)
        agreed[key] = sock.getsockname()[1]
        partial = agreement.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(partial, flags, 0o600), "w") as handle:
            handle.write(json.dumps(agreed, indent=1, sort_keys=True))
        os.replace(partial, agreement)
        return sock

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for writer in list(self._connections):
            writer.close()
        await self._server.wait_closed()
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = str((writer.get_extra_info("peername") or ("?",))[0])
        if not await self._is_allowed(peer):
            log.warning("model relay: refused a connection from %s (no egress proxy)", peer)
            writer.close()
            return
        try:
            upstream_reader, upstream = await asyncio.open_connection(*self.target)
        except OSError as exc:
            log.warning("model relay: the model API %s:%d does not answer: %s", *self.target, exc)
            writer.close()
            return
        self._connections.update((writer, upstream))
        try:
            await asyncio.gather(
                _pipe(reader, upstream, writer), _pipe(upstream_reader, writer, upstream)
            )
        finally:
            for end in (writer, upstream):
                self._connections.discard(end)
                end.close()

    async def _is_allowed(self, peer: str) -> bool:
        if peer in self._allowed:
            return True
        async with self._lookup_lock:
            if peer not in self._allowed and time.monotonic() - self._looked_up_at > PEER_REFRESH_S:
                # A proxy's address is podman's choice and may change when the proxy is
                # recreated: asked again, but not for every stranger's connection.
                self._looked_up_at = time.monotonic()
                try:
                    self._allowed = frozenset(await self._allowed_peers())
                except Exception as exc:  # a podman error: refuse, never let through
                    log.warning("model relay: cannot find the egress proxies' addresses: %s", exc)
                    self._allowed = frozenset()
        return peer in self._allowed


def _listening_socket(host: str, port: int, *, fallback: bool = True) -> socket.socket:
    """Shared with the other replicas' relays (``SO_REUSEPORT``: only sockets that all set
    it, of the same user, share a port; anything else holding it refuses the bind)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for attempt in (port, 0) if port and fallback else (port,):
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
            sock.bind((host, attempt))
            sock.listen(64)
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE and attempt and fallback:
                log.info("model relay: %s:%d is taken, using another port", host, attempt)
                continue
            raise
        sock.setblocking(False)
        return sock
    raise AssertionError("unreachable: port 0 either binds or raises")


async def _pipe(
    source: asyncio.StreamReader, sink: asyncio.StreamWriter, source_writer: asyncio.StreamWriter
) -> None:
    """Copy until end of stream, then half-close ``sink``. On an error both ends close, so
    the other direction's read ends too."""
    try:
        while data := await source.read(_CHUNK):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except (ConnectionError, OSError):
        for end in (sink, source_writer):
            with contextlib.suppress(Exception):
                end.close()
