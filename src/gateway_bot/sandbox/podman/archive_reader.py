"""Reading a tar stream a host's Podman API sends for a path in a container (``GET
/containers/{name}/archive``), as hostile input.

The container is the agent's: every name, type, size and byte of what podman packs from its
outbox is the agent's choice, and a host that is not this machine (or its podman) may send
anything at all. So the stream is read once, front to back, never extracted by name:

- only regular members directly under the requested directory are taken (``outbox/x``);
  links (symbolic or hard), directories' contents, devices, FIFOs, absolute names and
  names with ``..`` or an empty part are never written anywhere;
- the same bounds as a directory on this machine (``host_files``): at most ``max_files``
  files, each of at most ``max_file_bytes``, ``max_total_bytes`` in all. A member past a
  bound stops the read (what was taken before it stays taken: the rest waits for the next
  task), since skipping its bytes would mean reading them;
- the stream itself is bounded (``max_stream_bytes``) and so are tar's own header members
  (a PAX or GNU long-name header is read into memory whole by ``tarfile``: one of a
  gigabyte is refused before it is read);
- what is taken is written by the caller's ``save``, which opens its file no-follow and
  exclusive relative to a directory descriptor of the daemon's.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

MAX_HEADER_BYTES = 64 * 1024
"""A PAX, GNU long-name or long-link header member holds names and attributes: larger is
no archive podman made."""
MAX_MEMBERS = 10_000
"""Members of any kind looked at (headers cost 512 bytes each, and skipping a directory
member or a link reads nothing more): a million empty entries end the read here."""

_HEADER_TYPES = (
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
)


class ArchiveRefused(Exception):
    """The stream broke a bound or was not a tar stream; the message says which."""


@dataclass(frozen=True)
class ArchiveLimits:
    max_files: int
    max_file_bytes: int
    max_total_bytes: int

    @property
    def max_stream_bytes(self) -> int:
        """Everything the taken files may need, plus headers and padding of the members
        that may be looked at."""
        return self.max_total_bytes + (MAX_MEMBERS + self.max_files) * 2048 + 1024 * 1024


@dataclass(frozen=True)
class Taken:
    """A member taken: its name in the directory (as the container had it) and size."""

    name: str
    size: int


Save = Callable[[str, IO[bytes], int], None]
"""``save(name, data, size)``: write ``size`` bytes read from ``data`` somewhere of the
daemon's; raising OSError skips that member (it stays in the container)."""


class _BoundedStream(io.RawIOBase):
    """The response's chunks as a file, refusing to go past ``limit`` bytes."""

    def __init__(self, chunks: Iterable[bytes], limit: int) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._pending = b""
        self._left = limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._pending))
        if size > self._left:
            raise ArchiveRefused("the archive is larger than anything it may hold")
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        self._left -= size
        return size


class _HeaderBound(tarfile.TarInfo):
    """Refuses an oversized PAX or GNU long-name header before ``tarfile`` reads it into
    memory (``_proc_member`` is where it dispatches on the member's type)."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _HEADER_TYPES and self.size > MAX_HEADER_BYTES:
            raise ArchiveRefused(f"a tar header member of {self.size:,} bytes")
        return super()._proc_member(tarfile_)  # type: ignore[misc,no-any-return]


def member_name(raw: str, directory: str) -> str | None:
    """The name of a file directly in ``directory`` that member ``raw`` is, or None (the
    directory itself, anything deeper, absolute, or with ``..``, ``.`` or empty parts, or
    with a NUL or a backslash: never a name to use)."""
    if "\0" in raw or "\\" in raw or raw.startswith("/"):
        return None
    parts = raw.split("/")
    if len(parts) != 2 or parts[0] != directory:
        return None
    name = parts[1]
    if name in ("", ".", "..") or len(name.encode("utf-8", "surrogateescape")) > 255:
        return None
    return name


def read_regular_files(
    chunks: Iterable[bytes],
    directory: str,
    limits: ArchiveLimits,
    save: Save,
    skip: frozenset[str] = frozenset(),
) -> list[Taken]:
    """Take the regular files directly in ``directory`` from the tar stream ``chunks``
    (podman's archive of the container's ``/<directory>``), each handed to ``save``; the
    ones taken, in the stream's order. Raises ArchiveRefused only when nothing could be
    read at all; a bound broken later ends the read with what was taken so far."""
    taken: list[Taken] = []
    total = 0
    stream = io.BufferedReader(_BoundedStream(chunks, limits.max_stream_bytes))
    try:
        archive = tarfile.open(fileobj=stream, mode="r|", tarinfo=_HeaderBound)  # noqa: SIM115
    except (tarfile.TarError, EOFError) as exc:
        raise ArchiveRefused(f"not a tar archive: {exc}") from exc
    seen = 0
    try:
        for member in archive:
            seen += 1
            if seen > MAX_MEMBERS or len(taken) >= limits.max_files:
                break
            name = member_name(member.name, directory)
            if name is None or name in skip or not member.isreg():
                continue  # links, devices, FIFOs, directories, anything deeper: never used
            if member.size > min(limits.max_file_bytes, limits.max_total_bytes - total):
                break  # past a bound: skipping it would mean reading it
            data = archive.extractfile(member)
            if data is None:
                continue
            try:
                save(name, data, member.size)
            except OSError:
                continue
            total += member.size
            taken.append(Taken(name, member.size))
    except (ArchiveRefused, tarfile.TarError, EOFError, OSError):
        pass  # a broken or oversized stream ends the read; what was taken stays taken
    finally:
        archive.close()
    return taken


def read_one_file(chunks: Iterable[bytes], name: str, limit: int) -> bytes:
    """The bytes of the single regular file ``name`` that podman's archive of one path
    holds (its first member, named by the path's last part). Raises ArchiveRefused when it
    is anything else, or past ``limit`` bytes."""
    content, _ = read_tail(chunks, name, limit, limit)
    return content


def read_tail(chunks: Iterable[bytes], name: str, limit: int, max_size: int) -> tuple[bytes, bool]:
    """The last ``limit`` bytes of the single regular file ``name`` (its first member,
    named by the path's last part) and whether it held more, read front to back with only
    the tail kept. Raises ArchiveRefused when it is anything else or larger than
    ``max_size`` (refused before a byte of it is read)."""
    bound = max_size + 4 * MAX_HEADER_BYTES + 1024 * 1024
    stream = io.BufferedReader(_BoundedStream(chunks, bound))
    try:
        with tarfile.open(fileobj=stream, mode="r|", tarinfo=_HeaderBound) as archive:
            member = archive.next()
            if member is None or member.name != name:
                raise ArchiveRefused("the archive does not hold that file")
            if not member.isreg():
                raise ArchiveRefused("is not a regular file")
            if member.size > max_size:
                raise ArchiveRefused(
                    f"has {member.size:,} bytes, more than the {max_size:,} allowed"
                )
            data = archive.extractfile(member)
            tail, read = b"", 0
            while data is not None and read < member.size:
                chunk = data.read(min(1024 * 1024, member.size - read))
                if not chunk:
                    break
                read += len(chunk)
                tail = (tail + chunk)[-limit:] if limit > 0 else b""
    except (tarfile.TarError, EOFError) as exc:
        raise ArchiveRefused(f"not a readable archive: {exc}") from exc
    if read != member.size:
        raise ArchiveRefused("the archive ended inside the file")
    return tail, member.size > limit
