"""The egress proxy's directory on a host that does not share the daemon's disk (decision
0130): two named volumes of that host, reached only through its Podman API.

- ``gwb-proxy-<deployment>-egress``, mounted read-only at ``/egress`` in the proxy: its CA
  and key (made there, once, by mitmproxy's own code in a one-off container: the key never
  leaves the host), the upstream CA bundle and ``routes.json``. Written through a helper
  container (created, never started) by archive PUT: the proxy itself cannot write there.
- ``gwb-proxy-<deployment>-logs``, mounted read-write at ``/egress/logs``: the network logs,
  the readiness mark and ``listening.json``, read back by archive GET as the proxy's (and
  through it the agent's) words: bounded, never followed, never interpreted here.

The daemon's own ``<host>/egress`` directory stays on this machine for what is the
daemon's: the locks replicas take, its copy of ``routes.json`` (the one it edits; each edit
is then put whole into the volume) and a copy of the CA's certificate (put into each agent
container when created). ``routes.json`` is replaced in place there, not renamed: the addon
keeps its previous routes while the file does not parse (a prefix of a JSON object never
does) and reads it again at the next request, and each put carries a new modification time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from pathlib import Path
from typing import Any

from gateway_bot.sandbox.base import SandboxUnavailable
from gateway_bot.sandbox.context_files import FileRefused, LogTail
from gateway_bot.sandbox.podman import container_archive as archive
from gateway_bot.sandbox.podman.archive_reader import ArchiveRefused, read_one_file, read_tail
from gateway_bot.sandbox.podman.service import PodmanService

log = logging.getLogger(__name__)

CA_FILES = ("mitmproxy-ca.pem", "mitmproxy-ca-cert.pem", "mitmproxy-dhparam.pem")
MOUNT = "/egress"
_FILL = archive.FILL_AT
_STARTING = b"starting\n"
"""Put as ``logs/ready`` before a start: the addon's own mark (its process id) replaces it."""
MAX_CERTIFICATE_BYTES = 64 * 1024
MAX_MARK_BYTES = 64 * 1024
MAX_LOG_STREAM_BYTES = 256 * 1024 * 1024
"""A network log past this is not read through the API (its tail would need all of it)."""
_MAKE_CA = (
    "import os, shutil\n"
    "from mitmproxy.certs import CertStore\n"
    "p = '/egress/ca.partial'\n"
    "shutil.rmtree(p, ignore_errors=True); os.makedirs(p)\n"
    "CertStore.from_store(p, 'mitmproxy', 2048)\n"
    "shutil.rmtree('/egress/ca', ignore_errors=True); os.rename(p, '/egress/ca')\n"
)
"""Made in ``ca.partial`` and renamed whole: a maker killed half-way leaves no CA."""


class ProxyVolume:
    def __init__(
        self, service: PodmanService, deployment: str, proxy: str, directory: Path
    ) -> None:
        self._service = service
        self._deployment = deployment
        self._proxy = proxy
        self.proxy = proxy
        self._directory = directory
        self.volume = f"gwb-proxy-{deployment}-egress"
        self.logs_volume = f"gwb-proxy-{deployment}-logs"

    def volumes(self) -> dict[str, dict[str, Any]]:
        """The proxy's mounts of them (podman-py's ``volumes``)."""
        return {
            self.volume: {"bind": MOUNT, "extended_mode": ["ro", "nosuid", "nodev"]},
            self.logs_volume: {"bind": f"{MOUNT}/logs", "extended_mode": ["nosuid", "nodev"]},
        }

    async def prepare(self, labels: dict[str, str], image: str, routes: bytes) -> bool:
        """Before the proxy's create: the volumes, the upstream bundle, the routes as the
        daemon has them, the CA made when missing and its certificate copied here. Returns
        whether an upstream bundle was put."""

        def create(client: Any) -> None:
            for name in (self.volume, self.logs_volume):
                if not client.volumes.exists(name):
                    client.volumes.create(name, labels=labels)

        await self._service.api(create)
        bundle = await asyncio.to_thread(_upstream_bundle)
        members = [archive.bytes_member("routes.json", routes, 0o600)]
        if bundle is not None:
            members.append(archive.bytes_member("upstream-ca.pem", bundle))
        async with self._helper(labels, image) as helper:
            # ``logs``: the mount point of the logs volume inside the read-only one.
            await archive.write(self._service, helper, _FILL, archive.tar_of(members, ["logs"]))
            if not await self._has_ca(helper):
                await self._make_ca(labels, image)
            certificate = await archive.read(
                self._service,
                helper,
                f"{_FILL}/ca/mitmproxy-ca-cert.pem",
                lambda chunks, _: read_one_file(
                    chunks, "mitmproxy-ca-cert.pem", MAX_CERTIFICATE_BYTES
                ),
            )
        if not certificate:
            raise SandboxUnavailable("the egress proxy's CA has no certificate on its host")
        await asyncio.to_thread(_write_certificate, self._directory, certificate)
        return bundle is not None

    async def put_routes(self, routes: bytes) -> None:
        """``routes.json`` whole into the volume (the proxy re-reads it: a new mtime)."""
        labels = {"gateway-bot.deployment": self._deployment, "gateway-bot.role": "helper"}
        async with self._helper(labels, None) as helper:
            tar = archive.tar_of([archive.bytes_member("routes.json", routes, 0o600)])
            await archive.write(self._service, helper, _FILL, tar)

    async def mountpoint(self) -> str:
        """Where the egress volume is on the host (its sshd makes the asks socket there)."""
        attrs = await self._service.api(lambda c: dict(c.volumes.get(self.volume).attrs))
        return str(attrs["Mountpoint"])

    async def remove_socket(self, name: str) -> None:
        """A socket a previous forward left in the volume (sshd does not remove it), by
        ``rm`` in a one-off container with the volume (the proxy sees it read-only)."""
        label = f"gateway-bot.deployment={self._deployment}"
        await self._service.cli(
            "run", "--rm", *self._service.cli_limit_flags(), "--network=none",
            "--label", label, "--label", "gateway-bot.role=helper",
            "--mount", f"type=volume,source={self.volume},target={_FILL}",
            "--entrypoint", "rm", await self._image(), "-f", f"{_FILL}/{name}",
            check=False,
        )  # fmt: skip

    async def _image(self) -> str:
        return await self._service.api(lambda c: str(c.containers.get(self._proxy).attrs["Image"]))

    async def mark_starting(self) -> None:
        """Before a start (the proxy not running): its previous ready mark replaced."""
        tar = archive.tar_of([archive.bytes_member("ready", _STARTING)])
        await archive.write(self._service, self._proxy, f"{MOUNT}/logs", tar)

    async def ready(self) -> bool:
        mark = await self._read_mark("ready")
        return mark is not None and mark != _STARTING

    async def listening(self) -> bytes | None:
        """``listening.json`` as the addon wrote it (None when it writes none)."""
        return await self._read_mark("listening.json")

    async def log_tail(self, context_id: str, limit: int) -> LogTail | None:
        """The last ``limit`` bytes of the context's network log, a regular file in the
        logs volume (agent-chosen URLs: data)."""
        name = f"{context_id}.log"
        try:
            found = await archive.read(
                self._service,
                self._proxy,
                f"{MOUNT}/logs/{name}",
                lambda chunks, _: read_tail(chunks, name, limit, MAX_LOG_STREAM_BYTES),
            )
        except ArchiveRefused as exc:
            raise FileRefused(f"The network log is not readable: {exc}.") from exc
        except archive.ArchiveCallFailed:
            return None  # no proxy container (yet, or any more): no log to show
        if found is None:
            return None
        data, cut = found
        return LogTail(data, cut)

    async def drop_log(self, context_id: str) -> None:
        """Removed by ``rm`` in the proxy, when it runs; otherwise it stays in the volume."""
        await self._service.cli(
            "exec", self._proxy, "rm", "-f", f"{MOUNT}/logs/{context_id}.log", check=False
        )

    async def _read_mark(self, name: str) -> bytes | None:
        try:
            return await archive.read(
                self._service,
                self._proxy,
                f"{MOUNT}/logs/{name}",
                lambda chunks, _: read_one_file(chunks, name, MAX_MARK_BYTES),
            )
        except (ArchiveRefused, archive.ArchiveCallFailed):
            return None

    async def _has_ca(self, helper: str) -> bool:
        for name in CA_FILES:
            if not await archive.exists(self._service, helper, f"{_FILL}/ca/{name}"):
                return False
        return True

    async def _make_ca(self, labels: dict[str, str], image: str) -> None:
        log.info("egress proxy: making its CA in volume %s on %s", self.volume, self._service.host)
        label_flags = [f for n, v in labels.items() for f in ("--label", f"{n}={v}")]
        result = await self._service.cli(
            "run", "--rm", *self._service.cli_limit_flags(), "--network=none", *label_flags,
            "--mount", f"type=volume,source={self.volume},target={MOUNT}",
            "--entrypoint", "/opt/mitmproxy/bin/python3",
            image, "-c", _MAKE_CA,
            check=False, timeout_s=300,
        )  # fmt: skip
        if result.returncode != 0:
            raise SandboxUnavailable(
                "could not make the egress proxy's CA: "
                + self._service.explain((result.stdout + result.stderr).strip()[-500:])
            )

    def _helper(self, labels: dict[str, str], image: str | None) -> Any:
        """A filling container of the egress volume (``container_archive.filling``), on
        ``image`` or else the proxy's own."""

        def image_of(client: Any) -> str:
            return image or str(client.containers.get(self._proxy).attrs["Image"])

        return archive.filling(self._service, self.volume, labels, image_of, "gwb-proxy-fill")


def _upstream_bundle() -> bytes | None:
    bundle = Path(ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")
    try:
        return bundle.read_bytes()
    except OSError:
        return None


def _write_certificate(directory: Path, certificate: bytes) -> None:
    """This machine's copy, replaced whole (a new name, then a rename)."""
    ca = directory / "ca"
    ca.mkdir(parents=True, exist_ok=True)
    partial = ca / f".cert-{os.getpid()}-{time.monotonic_ns()}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(partial, flags, 0o644), "wb") as handle:
        handle.write(certificate)
    os.replace(partial, ca / "mitmproxy-ca-cert.pem")
