"""A hostile container answering for its outbox on a host that shares no disk with the daemon
(decision 0130). The daemon takes the outbox as the tar podman packs (``GET
/containers/{name}/archive?path=/outbox``); every header in it is the agent's to choose (a
compromised host's too). Each test feeds the reader the stream such a container makes and
checks what the attacker wanted: a file written outside sent/, a link the daemon then
follows, a host file sent as an attachment, or the daemon's memory and time.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway_bot.sandbox.podman.archive_reader import (
    MAX_HEADER_BYTES,
    ArchiveLimits,
    ArchiveRefused,
    read_one_file,
    read_regular_files,
)
from gateway_bot.sandbox.podman.volume_files import SentFiles

LIMITS = ArchiveLimits(max_files=20, max_file_bytes=4096, max_total_bytes=16384)
"""The outbox rule's shape (count, file, total) at a size a test can go past."""


def _member(name: str, data: bytes = b"", **attributes: object) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in attributes.items():
        setattr(info, key, value)
    return info, data


def _stream(*members: tuple[tarfile.TarInfo, bytes], pax: bool = False) -> bytes:
    out = io.BytesIO()
    form = tarfile.PAX_FORMAT if pax else tarfile.GNU_FORMAT
    with tarfile.open(fileobj=out, mode="w", format=form) as archive:
        top = tarfile.TarInfo("outbox")
        top.type = tarfile.DIRTYPE
        archive.addfile(top)
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return out.getvalue()


class Pulled:
    """The response body in 64 KiB chunks, counting what the reader pulled."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.pulled = 0

    def __iter__(self) -> Iterator[bytes]:
        for start in range(0, len(self.body), 65536):
            chunk = self.body[start : start + 65536]
            self.pulled += len(chunk)
            yield chunk


def _take(tmp_path: Path, body: bytes) -> tuple[list[str], Path, Pulled]:
    into = tmp_path / "sent" / "task"
    saver = SentFiles(into)
    pulled = Pulled(body)
    taken = read_regular_files(pulled, "outbox", LIMITS, saver)
    return [t.name for t in taken], into, pulled


def _everything_under(root: Path) -> list[str]:
    found = []
    for directory, names, files in os.walk(root):
        for name in names + files:
            found.append(os.path.relpath(os.path.join(directory, name), root))
    return sorted(found)


def test_a_symlink_member_to_a_host_file_is_never_created_nor_sent(tmp_path: Path) -> None:
    secret = tmp_path / "daemon-secret"
    secret.write_text("the daemon's own")
    body = _stream(
        _member("outbox/report.txt", b"fine"),
        _member("outbox/passwd", type=tarfile.SYMTYPE, linkname=str(secret)),
    )
    names, into, _ = _take(tmp_path, body)
    assert names == ["report.txt"]
    assert _everything_under(into) == ["report.txt"], "no link made in sent/"
    assert not any(p.is_symlink() for p in into.iterdir())


def test_a_dot_dot_member_writes_nothing_outside_sent(tmp_path: Path) -> None:
    body = _stream(
        _member("outbox/../escape.txt", b"out of sent/"),
        _member("outbox/../../escape.txt", b"further out"),
        _member("../escape.txt", b"from the top"),
        _member("outbox/inner/../../escape.txt", b"through a directory"),
    )
    names, _, _ = _take(tmp_path, body)
    assert names == []
    assert _everything_under(tmp_path) in ([], ["sent"], ["sent", "sent/task"])
    assert not (tmp_path / "escape.txt").exists()
    assert not (tmp_path / "sent" / "escape.txt").exists()


def test_an_absolute_member_writes_nothing_at_its_path(tmp_path: Path) -> None:
    target = tmp_path / "planted.txt"
    body = _stream(_member(str(target), b"absolute"), _member(f"outbox/{target}", b"nested"))
    names, into, _ = _take(tmp_path, body)
    assert names == []
    assert not target.exists()
    assert not into.exists() or _everything_under(into) == []


def test_a_hard_link_member_sends_no_host_file(tmp_path: Path) -> None:
    """A hard link names another member or a host path: tarfile would copy what it names
    (on extraction, the host file). It is skipped; a regular file beside it still goes."""
    body = _stream(
        _member("outbox/shadow", type=tarfile.LNKTYPE, linkname="/etc/shadow"),
        _member("outbox/real.txt", b"real"),
        _member("outbox/again", type=tarfile.LNKTYPE, linkname="outbox/real.txt"),
    )
    names, into, _ = _take(tmp_path, body)
    assert names == ["real.txt"]
    assert _everything_under(into) == ["real.txt"]
    assert (into / "real.txt").read_bytes() == b"real"


def test_devices_fifos_and_deeper_files_are_never_made(tmp_path: Path) -> None:
    body = _stream(
        _member("outbox/null", type=tarfile.CHRTYPE, devmajor=1, devminor=3),
        _member("outbox/disk", type=tarfile.BLKTYPE, devmajor=8, devminor=0),
        _member("outbox/pipe", type=tarfile.FIFOTYPE),
        _member("outbox/sub", type=tarfile.DIRTYPE),
        _member("outbox/sub/deeper.txt", b"deeper"),
        _member("outbox/ok.txt", b"ok"),
    )
    names, into, _ = _take(tmp_path, body)
    assert names == ["ok.txt"]
    assert _everything_under(into) == ["ok.txt"]


def test_a_member_past_the_file_limit_stops_the_read_without_reading_it(
    tmp_path: Path,
) -> None:
    huge = b"x" * (4 * 1024 * 1024)
    body = _stream(
        _member("outbox/first.txt", b"first"),
        _member("outbox/huge.bin", huge),
        _member("outbox/after.txt", b"after"),
    )
    names, into, pulled = _take(tmp_path, body)
    assert names == ["first.txt"], "the big one and what follows wait in the outbox"
    assert _everything_under(into) == ["first.txt"]
    assert pulled.pulled < 512 * 1024, f"the reader pulled {pulled.pulled} bytes of 4 MiB"


def test_a_member_that_lies_about_its_size_leaves_no_partial_file(tmp_path: Path) -> None:
    body = _stream(_member("outbox/whole.txt", b"whole"), _member("outbox/cut.txt", b"c" * 3000))
    cut = body[: body.index(b"c" * 3000) + 1000]  # the stream ends inside the file
    names, into, _ = _take(tmp_path, cut)
    assert names == ["whole.txt"]
    assert _everything_under(into) == ["whole.txt"]


def test_more_members_than_the_limit_take_only_the_limit(tmp_path: Path) -> None:
    body = _stream(*(_member(f"outbox/f{i:03}.txt", b"x") for i in range(60)))
    names, into, _ = _take(tmp_path, body)
    assert len(names) == LIMITS.max_files
    assert len(_everything_under(into)) == LIMITS.max_files


def test_many_small_files_stop_at_the_total_byte_limit(tmp_path: Path) -> None:
    body = _stream(*(_member(f"outbox/f{i}.bin", b"y" * 4000) for i in range(10)))
    names, _, _ = _take(tmp_path, body)
    assert sum(4000 for _ in names) <= LIMITS.max_total_bytes
    assert len(names) == 4


def test_a_giant_pax_header_is_refused_before_it_is_read_into_memory(tmp_path: Path) -> None:
    """``tarfile`` reads a PAX header member into memory whole: one claiming 200 MB (and
    sending it) would cost the daemon that much before any name is checked."""
    info = tarfile.TarInfo("outbox/big-header.txt")
    info.pax_headers = {"comment": "z" * (2 * MAX_HEADER_BYTES)}
    body = _stream((info, b""), _member("outbox/later.txt", b"later"), pax=True)
    names, _, pulled = _take(tmp_path, body)
    assert names == []
    assert pulled.pulled < 2 * MAX_HEADER_BYTES


def test_an_endless_stream_of_empty_entries_ends(tmp_path: Path) -> None:
    entries = (_member(f"outbox/d{i}", type=tarfile.DIRTYPE) for i in range(12_000))
    names, _, pulled = _take(tmp_path, _stream(*entries))
    assert names == []
    assert pulled.pulled < 12_000 * 1024


def test_a_single_file_read_refuses_a_link_or_an_oversized_file() -> None:
    link = _stream(_member("schedule.json", type=tarfile.SYMTYPE, linkname="/etc/shadow"))
    link = link[512:]  # a one-path archive has no directory entry first
    with pytest.raises(ArchiveRefused, match="not a regular file"):
        read_one_file(Pulled(link), "schedule.json", 4096)
    big = _stream(_member("schedule.json", b"{" * 5000))[512:]
    with pytest.raises(ArchiveRefused, match="more than"):
        read_one_file(Pulled(big), "schedule.json", 4096)
    fine = _stream(_member("schedule.json", b"{}"))[512:]
    assert read_one_file(Pulled(fine), "schedule.json", 4096) == b"{}"
