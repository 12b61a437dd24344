"""A hostile network log on a host that shares no disk with the daemon (decision 0130): the
egress proxy writes each conversation's log into its logs volume there, and the daemon reads
its tail back as the tar podman packs (``GET /containers/{proxy}/archive``). The lines are
about requests the agent chose, and the proxy (or the host) that packs them is less trusted
than the daemon: each test feeds the reader the stream such a host makes and checks what the
attacker wanted (the daemon's memory and time, another file read in the log's place, markup
in what the dashboard shows).
"""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from gateway_bot.core.conversations.network_log import parse_network_log
from gateway_bot.sandbox.podman.archive_reader import MAX_HEADER_BYTES, ArchiveRefused, read_tail
from tests.security.test_security_remote_outbox_archive import Pulled

NAME = "c0ffee.log"


def _log_stream(name: str, data: bytes, *, kind: bytes = tarfile.REGTYPE, link: str = "") -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        info = tarfile.TarInfo(name)
        info.type, info.linkname = kind, link
        info.size = len(data) if kind == tarfile.REGTYPE else 0
        archive.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return out.getvalue()


def test_a_log_larger_than_allowed_is_refused_before_its_bytes_are_pulled() -> None:
    """A flood of requests (or a proxy writing on purpose) grows the log: its size, in the
    member's header, refuses it before the daemon reads it through the SSH connection."""
    body = _log_stream(NAME, b"x" * (2 * 1024 * 1024))
    pulled = Pulled(body)
    with pytest.raises(ArchiveRefused, match="more than"):
        read_tail(pulled, NAME, 4096, max_size=256 * 1024)
    assert pulled.pulled < 256 * 1024, "the log's bytes were pulled before the refusal"


def test_only_the_tail_is_kept_of_a_log_within_the_bound() -> None:
    lines = b"".join(b'{"url": "http://x/%d"}\n' % n for n in range(50_000))
    tail, cut = read_tail(Pulled(_log_stream(NAME, lines)), NAME, 4096, max_size=len(lines))
    assert cut
    assert len(tail) == 4096
    assert lines.endswith(tail)


@pytest.mark.parametrize(
    ("kind", "link"),
    [(tarfile.SYMTYPE, "/etc/shadow"), (tarfile.LNKTYPE, "egress/ca/mitmproxy-ca.pem")],
)
def test_a_link_where_the_log_should_be_is_refused(kind: bytes, link: str) -> None:
    """A link in the logs volume (to the CA's key, to a file of the host): never read."""
    with pytest.raises(ArchiveRefused):
        read_tail(Pulled(_log_stream(NAME, b"", kind=kind, link=link)), NAME, 4096, 1 << 20)


def test_another_file_in_the_logs_place_is_refused() -> None:
    """The stream names another conversation's log: it is not shown as this one's."""
    other = _log_stream("another-context.log", b'{"url": "http://secret/"}\n')
    with pytest.raises(ArchiveRefused, match="does not hold that file"):
        read_tail(Pulled(other), NAME, 4096, 1 << 20)


def test_an_oversized_tar_header_is_refused_before_it_is_read() -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        info = tarfile.TarInfo(NAME)
        info.pax_headers = {"comment": "y" * (MAX_HEADER_BYTES * 4)}
        archive.addfile(info, io.BytesIO(b""))
    with pytest.raises(ArchiveRefused, match="header"):
        read_tail(Pulled(out.getvalue()), NAME, 4096, 1 << 20)


def test_agent_chosen_urls_come_back_as_data() -> None:
    """A URL carrying markup and a forged line: one entry, its text as it was, cut."""
    url = "http://x/<script>alert(1)</script>" + "a" * 5000
    line = json.dumps({"time": "t", "method": "GET", "url": url, "allowed": False}).encode()
    tail, cut = read_tail(Pulled(_log_stream(NAME, line + b"\n")), NAME, 1 << 16, 1 << 20)
    shown = parse_network_log(tail, cut=cut)
    assert len(shown.requests) == 1
    request = shown.requests[0]
    assert request.allowed is False
    assert request.url.startswith("http://x/<script>")
    assert len(request.url) <= 600, "cut to a length"
