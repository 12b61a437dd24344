"""``ContextFiles`` for a context whose directories are named volumes on a Podman host that
does not share the daemon's disk (decision 0130): reached only through that host's API.

Files go in as a tar made here (``PUT`` of the archive endpoint) and come out as a tar
podman packs from the container (``GET``), read by ``archive_reader`` as hostile input and
written on the daemon's side no-follow and exclusive, relative to a descriptor of the
daemon's own directory. The workspace is cloned and compared by git in the container
(``remote_workspace``); what that git says is data, bounded. Podman resolves every path in
the container's root: a link the agent left can only lead to another of its own files.

The container must exist for any of this: ``ready`` (the sandbox's own preparation, under
the context's lock) makes or starts it when an operation needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, Any

from gateway_bot.sandbox.context_files import (
    DiffBase,
    FileRefused,
    GitOrigin,
    LogTail,
    WorkspaceChanges,
)
from gateway_bot.sandbox.disk_usage import DiskUsage
from gateway_bot.sandbox.host_files import (
    MAX_OUTBOX_BYTES,
    MAX_OUTBOX_FILE_BYTES,
    MAX_OUTBOX_FILES,
    NAME_MAX_BYTES,
    HostContextFiles,
    shown_name,
)
from gateway_bot.sandbox.podman import container_archive as archive
from gateway_bot.sandbox.podman import containers as spec
from gateway_bot.sandbox.podman import remote_workspace
from gateway_bot.sandbox.podman.archive_reader import (
    ArchiveLimits,
    ArchiveRefused,
    read_one_file,
    read_regular_files,
)
from gateway_bot.sandbox.podman.container_exec import exec_bounded
from gateway_bot.sandbox.podman.proxy_volume import ProxyVolume
from gateway_bot.sandbox.podman.service import API_ERRORS, PodmanService
from gateway_bot.sandbox.podman.volumes import remove_volumes

log = logging.getLogger(__name__)

OUTBOX_LIMITS = ArchiveLimits(MAX_OUTBOX_FILES, MAX_OUTBOX_FILE_BYTES, MAX_OUTBOX_BYTES)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1024 * 1024

Ready = Callable[[], Awaitable[None]]


DF_ATTEMPTS = 4
"""Tries of the host's disk usage (``system df``) before a measurement fails."""


class VolumeContextFiles:
    """A context's volumes on ``service``'s host, through container ``gwb-<context>``."""

    def __init__(
        self,
        service: PodmanService,
        context_id: str,
        ready: Ready,
        daemon_side: HostContextFiles,
        proxy_volume: ProxyVolume | None = None,
    ) -> None:
        self._service = service
        self._context_id = context_id
        self._container = spec.container_name(context_id)
        self._ready = ready
        self._daemon_side = daemon_side
        """The paths of the daemon's own side (the network log, in the proxy's directory)."""
        self._proxy_volume = proxy_volume
        """The host's proxy keeps its network logs there (read through the API)."""

    async def ensure_workspace(self, origin: GitOrigin) -> None:
        if await self.workspace_exists():
            return
        await self._ready()
        await remote_workspace.clone(self._service, self._container, origin)

    async def workspace_exists(self) -> bool:
        git = f"{spec.PATHS.workspace}/.git"
        return await archive.exists(self._service, self._container, git)

    async def put_inbox(self, names: Sequence[str], source: Path) -> str:
        inbox = spec.PATHS.inbox
        await self._ready_if_missing()
        for candidate in names:
            if len(candidate.encode("utf-8", "surrogateescape")) > NAME_MAX_BYTES:
                continue
            if await archive.exists(self._service, self._container, f"{inbox}/{candidate}"):
                continue
            tar = await asyncio.to_thread(_tar_of_staged, source, candidate)
            try:
                await archive.write(self._service, self._container, inbox, tar)
            except OSError as exc:
                raise FileRefused(f"{names[0]} could not be stored ({exc})") from exc
            finally:
                tar.close()
            return candidate
        raise FileRefused(f"{names[0]}: the inbox already has {len(names)} files of that name")

    async def take_outbox(self, into: Path, skip: frozenset[str]) -> list[Path]:
        outbox = spec.PATHS.outbox
        saver = SentFiles(into)

        def reader(chunks: Iterable[bytes], _stat: dict[str, Any]) -> list[str]:
            taken = read_regular_files(chunks, outbox.lstrip("/"), OUTBOX_LIMITS, saver, skip)
            return [t.name for t in taken]

        try:
            names = await archive.read(self._service, self._container, outbox, reader)
        except ArchiveRefused as exc:
            log.warning("outbox of %s not read: %s", self._context_id, exc)
            return []
        if not names:
            return []
        await self._remove_in_container([f"{outbox}/{name}" for name in names])
        return saver.written

    async def take_outbox_file(self, name: str, limit: int) -> bytes | None:
        path = f"{spec.PATHS.outbox}/{name}"

        def reader(chunks: Iterable[bytes], stat: dict[str, Any]) -> bytes:
            if not archive.is_plain_file(stat):
                raise FileRefused("is not a regular file (or is a link)")
            return read_one_file(chunks, name, limit)

        try:
            return await archive.read(self._service, self._container, path, reader)
        except ArchiveRefused as exc:
            raise FileRefused(str(exc)) from None
        finally:
            if await archive.exists(self._service, self._container, path):
                await self._remove_in_container([path])

    async def workspace_changes(self, base: DiffBase) -> WorkspaceChanges:
        await self._ready()
        return await remote_workspace.changes(self._service, self._container, base)

    async def measure(self) -> DiskUsage:
        """The host's own count of each volume's bytes (podman's ``system df``), not the
        container's ``du``, which the agent could replace."""
        wanted = {spec.volume_name(self._context_id, d): d for d in spec.DIRECTORIES}

        def call(client: Any) -> dict[str, int]:
            sizes = {}
            for volume in client.df().get("Volumes") or []:
                directory = wanted.get(volume.get("VolumeName"))
                if directory is not None:
                    sizes[directory] = int(volume.get("Size") or 0)
            return sizes

        for attempt in range(1, DF_ATTEMPTS + 1):
            try:
                sizes = await self._service.api(call)
                break
            except API_ERRORS as exc:
                # podman 4.3's df walks every container of the host and fails when one is
                # removed meanwhile (another conversation's, a helper): asked again.
                if attempt == DF_ATTEMPTS:
                    raise OSError(f"the host's disk usage could not be read: {exc}") from exc
                await asyncio.sleep(0.2 * attempt)
        by_directory = sorted(
            ((d, sizes.get(d, 0)) for d in spec.DIRECTORIES), key=lambda p: p[1], reverse=True
        )
        return DiskUsage(tuple(by_directory), complete=True)

    async def put_home_file(self, relative: str, data: bytes) -> None:
        parts = _relative_parts(relative)
        parents = ["/".join(parts[: i + 1]) for i in range(len(parts) - 1)]
        tar = archive.tar_of([archive.bytes_member("/".join(parts), data)], parents)
        await self._ready_if_missing()
        await archive.write(self._service, self._container, spec.PATHS.home, tar)

    async def make_home_dir(self, relative: str) -> None:
        parts = _relative_parts(relative)
        tar = archive.tar_of([], ["/".join(parts[: i + 1]) for i in range(len(parts))])
        await self._ready_if_missing()
        await archive.write(self._service, self._container, spec.PATHS.home, tar)

    async def remove(self) -> None:
        await remove_volumes(self._service, self._context_id)

    async def network_log_tail(self, limit: int) -> LogTail | None:
        if self._proxy_volume is not None:
            return await self._proxy_volume.log_tail(self._context_id, limit)
        return await self._daemon_side.network_log_tail(limit)

    async def _ready_if_missing(self) -> None:
        if not await archive.exists(self._service, self._container, "/"):
            await self._ready()

    async def _remove_in_container(self, paths: list[str]) -> None:
        """Taken files go from the outbox (by the container's own ``rm``: the agent's to
        replace, which only sends its files twice). A stopped container keeps them."""
        try:
            done = await exec_bounded(
                self._service, self._container, ["rm", "-f", "--", *paths], limit=4096
            )
        except (OSError, TimeoutError) as exc:
            log.warning("taken outbox files of %s not removed: %s", self._context_id, exc)
            return
        if done.code != 0:
            log.warning("taken outbox files of %s not removed: %s", self._context_id, done.error)


def _relative_parts(relative: str) -> list[str]:
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"not a relative path in the home: {relative!r}")
    return parts


def _tar_of_staged(source: Path, name: str) -> IO[bytes]:
    """A one-member tar of the daemon's staged file (its own: opened no-follow all the same)."""
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        return archive.tar_of([(name, handle, size, 0o644)])


class SentFiles:
    """``archive_reader``'s ``save`` into the daemon's ``into`` (sent/<task>): each file
    under its shown name, made exclusive and no-follow relative to ``into``'s descriptor."""

    def __init__(self, into: Path) -> None:
        self._into = into
        self.written: list[Path] = []

    def __call__(self, name: str, data: IO[bytes], size: int) -> None:
        self._into.mkdir(parents=True, exist_ok=True)
        shown = shown_name(name, {p.name for p in self.written})
        directory = os.open(self._into, _DIR_FLAGS)
        try:
            try:
                out = os.open(shown, _WRITE_FLAGS, 0o600, dir_fd=directory)
            except FileExistsError:  # a re-run after a crash: sent/ is the daemon's alone
                os.unlink(shown, dir_fd=directory)
                out = os.open(shown, _WRITE_FLAGS, 0o600, dir_fd=directory)
            try:
                _copy_exactly(data, out, size)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(shown, dir_fd=directory)
                raise
            finally:
                os.close(out)
        finally:
            os.close(directory)
        self.written.append(self._into / shown)


def _copy_exactly(data: IO[bytes], out: int, size: int) -> None:
    left = size
    while left > 0:
        chunk = data.read(min(left, _CHUNK))
        if not chunk:
            raise OSError(errno.EIO, "the archive ended inside a file")
        left -= len(chunk)
        view = memoryview(chunk)
        while view:
            view = view[os.write(out, view) :]
