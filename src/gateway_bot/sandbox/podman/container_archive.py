"""Files in and out of a context's container through its host's Podman API: the archive
endpoint (``/containers/{name}/archive``: HEAD to ask whether a path exists, GET for a tar of
it, PUT to unpack a tar into a directory). Works on a created or stopped container as on a
running one, and reaches its volumes as mounted.

Podman resolves every path inside the container's root, so a link the agent left there
sends a write or a read to another of the container's own files, never to one of the host.
What a GET brings back is the agent's, read with ``archive_reader`` alone; what a PUT sends
is a tar made here, of names and bytes the daemon chose.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import secrets
import tarfile
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import IO, Any, TypeVar

from podman.errors import NotFound

from gateway_bot.sandbox.podman.service import PodmanService

T = TypeVar("T")
_CHUNK = 64 * 1024
_NOT_REGULAR = (1 << 31) | (1 << 27) | (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)
"""Go's ``os.FileMode`` type bits (directory, symlink, device, named pipe, socket, character
device, irregular) in the stat podman sends along (``X-Docker-Container-Path-Stat``)."""


class ArchiveCallFailed(OSError):
    """Podman refused an archive call (the container is gone, the path not a directory...)."""


def _path(container: str) -> str:
    return f"/containers/{container}/archive"


async def exists(service: PodmanService, container: str, path: str) -> bool:
    """Is there an entry at ``path`` in the container (False too when there is no
    container)? Asks for its stat alone: nothing of it is sent."""

    def call(client: Any) -> bool:
        response = client.api.head(_path(container), params={"path": path})
        return bool(response.status_code == 200)

    return await service.api(call)


def path_stat(headers: Any) -> dict[str, Any]:
    """Podman's stat of the path asked for (name, size, mode, isDir; ``linkTarget`` is the
    path resolved, set for plain files too); {} when absent."""
    raw = headers.get("x-docker-container-path-stat")
    if not raw:
        return {}
    try:
        decoded = json.loads(base64.b64decode(raw))
    except ValueError:
        return {}
    return decoded if isinstance(decoded, dict) else {}


def is_plain_file(stat: dict[str, Any]) -> bool:
    """The stat describes a regular file (not a link to one, a directory, a FIFO...)."""
    mode = stat.get("mode")
    return isinstance(mode, int) and not mode & _NOT_REGULAR and not stat.get("isDir")


async def read(
    service: PodmanService,
    container: str,
    path: str,
    reader: Callable[[Iterable[bytes], dict[str, Any]], T],
) -> T | None:
    """``reader(chunks, stat)`` over the tar stream of ``path``, streamed (never held whole);
    None when there is no such path. ``reader`` runs on the API's thread."""

    def call(client: Any) -> T | None:
        response = client.api.get(_path(container), params={"path": path}, stream=True)
        try:
            if response.status_code == 404:
                return None
            if response.status_code != 200:
                raise ArchiveCallFailed(f"podman refused to read {path}: {response.text[:300]}")
            return reader(response.iter_content(_CHUNK), path_stat(response.headers))
        finally:
            response.close()

    return await service.api(call)


WRITE_ATTEMPTS = 3
"""Podman 4.3 now and then ends a PUT into a container that is not running with "passing
bulk input to subprocess: ... broken pipe" (its copier's child gone before reading the
tar; seen under load, with nothing written): that one refusal is tried again."""


async def write(service: PodmanService, container: str, directory: str, tar: IO[bytes]) -> None:
    """Unpack ``tar`` (made here) into ``directory`` of the container."""

    def call(client: Any) -> None:
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            tar.seek(0)
            response = client.api.put(_path(container), params={"path": directory}, data=tar)
            if response.status_code == 200:
                return
            if attempt < WRITE_ATTEMPTS and "broken pipe" in response.text:
                time.sleep(0.2 * attempt)
                continue
            raise ArchiveCallFailed(
                f"podman refused to write into {directory}: {response.text[:300]}"
            )

    await service.api(call)


def tar_of(
    files: Sequence[tuple[str, IO[bytes], int, int]], directories: Sequence[str] = ()
) -> IO[bytes]:
    """A tar (in memory or spilled to a temporary file past a few MB) of ``directories``
    (relative names, mode 0755) then ``files`` (relative name, data, size, mode)."""
    import tempfile

    out = tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024)  # noqa: SIM115
    now = time.time()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name in directories:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, now
            archive.addfile(info)
        for name, data, size, mode in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = size, mode, now
            archive.addfile(info, data)
    out.seek(0)
    return out


def bytes_member(name: str, data: bytes, mode: int = 0o644) -> tuple[str, IO[bytes], int, int]:
    return name, io.BytesIO(data), len(data), mode


FILL_AT = "/fill"
"""Where ``filling`` mounts the volume it fills."""


@contextlib.asynccontextmanager
async def filling(
    service: PodmanService,
    volume: str,
    labels: dict[str, str],
    image: Callable[[Any], str],
    name_prefix: str,
) -> AsyncIterator[str]:
    """A container (created, never started, no network) with ``volume`` at ``FILL_AT``
    read-write, for archive PUTs and GETs into the volume; removed afterwards. ``image``:
    its image, chosen with the API client (any image of the host will do)."""
    name = f"{name_prefix}-{secrets.token_hex(4)}"

    def create(client: Any) -> None:
        client.containers.create(
            image(client),
            name=name,
            entrypoint=["/bin/false"],
            labels=labels,
            network_mode="none",
            volumes={volume: {"bind": FILL_AT, "mode": "rw"}},
            runtime=service.runtime,
            ulimits=service.api_ulimits(),
        )

    def remove(client: Any) -> None:
        with contextlib.suppress(NotFound):
            client.containers.get(name).remove(force=True)

    await service.api(create)
    try:
        yield name
    finally:
        await service.api(remove)
