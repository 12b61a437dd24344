"""What a git push over smart HTTP would change, read from the start of its request body, and
the answer git understands when the push is refused.

A push is ``POST .../git-receive-pack`` whose body is pkt-lines (``old-sha new-sha ref``, the
first with the client's capabilities after a NUL), a flush, then the packfile. The refs are
what an approval must show; the commits' subjects are a courtesy, read from the packfile only
while it is cheap (commit objects come first in a pack git writes; reading stops at the first
object that is not a plain commit, or at the end of the bytes given).

Standard library only, on purpose: the proxy image gets a copy of this file beside its addon
(``egress_git_push.py``), so the proxy (which shapes the refusal) and the daemon (which shows
the push to a person) read a body with the same code. The body is hostile input: every length
is bounded, nothing is trusted to be well formed, and no parse raises.
"""

from __future__ import annotations

import hashlib
import re
import struct
import zlib
from dataclasses import dataclass

ZERO_SHA = "0" * 40
MAX_REFS = 100
MAX_COMMITS = 50
MAX_COMMIT_BYTES = 64 * 1024
MAX_SUBJECT_CHARS = 200
MAX_REF_CHARS = 200
_COMMAND = re.compile(
    r"^([0-9a-fA-F]{40}|[0-9a-fA-F]{64}) ([0-9a-fA-F]{40}|[0-9a-fA-F]{64}) (.+)$", re.DOTALL
)
"""A command as git's receive-pack reads it (``queue_command``): hex in either case, and the
ref name is the rest of the line, whatever it holds (git rejects a funny name on its own, and
still applies the other refs of the push, so the parse must not stop at one)."""
_COMMIT, _TREE, _BLOB, _TAG, _OFS_DELTA, _REF_DELTA = 1, 2, 3, 4, 6, 7


@dataclass(frozen=True)
class RefUpdate:
    """One ref a push changes (``old``/``new`` are all zeros for a create/delete)."""

    ref: str
    old: str
    new: str

    @property
    def kind(self) -> str:
        if set(self.old) == {"0"}:
            return "create"
        if set(self.new) == {"0"}:
            return "delete"
        return "update"

    def describe(self) -> str:
        """One card line; the name as printable text on one line (git takes any bytes)."""
        ref = "".join(ch if ch.isprintable() and ch != " " else "?" for ch in self.ref)
        if len(ref) > MAX_REF_CHARS:
            ref = ref[: MAX_REF_CHARS - 1] + "…"
        if self.kind == "create":
            return f"create {ref} at {self.new[:12]}"
        if self.kind == "delete":
            return f"delete {ref} (was {self.old[:12]})"
        return f"update {ref} {self.old[:12]}..{self.new[:12]}"


@dataclass(frozen=True)
class PushSummary:
    refs: tuple[RefUpdate, ...]
    capabilities: tuple[str, ...]
    commit_subjects: tuple[str, ...]
    """The packed commits' first lines, in pack order (newest first for a plain push)."""
    commits_complete: bool
    """Every commit in the pack was read (else ``commit_subjects`` is the first few)."""
    refs_complete: bool = False
    """Every command of the push was read up to its flush (else the push may change refs
    ``refs`` does not list: past ``MAX_REFS``, past the bytes given, or a line git reads
    that this parse does not, such as a push certificate)."""


def parse_push(body: bytes) -> PushSummary:
    """The refs, capabilities and (cheaply) commits of a receive-pack request body (or of
    its first bytes). Never raises; what cannot be read is left out."""
    refs: list[RefUpdate] = []
    capabilities: tuple[str, ...] = ()
    position = 0
    commands = True
    ended = False
    more = False
    while position + 4 <= len(body):
        try:
            length = int(body[position : position + 4], 16)
        except ValueError:
            break
        if length == 0:
            position += 4
            ended = True
            break
        if length < 4 or position + length > len(body):
            break
        payload = body[position + 4 : position + length]
        position += length
        line, _, caps = payload.removesuffix(b"\n").partition(b"\0")  # git chomps one
        if not refs and caps:
            capabilities = tuple(c for c in caps.decode("ascii", "replace").split() if c)[:50]
        text = line.decode("utf-8", "replace")
        if text.startswith("shallow "):
            continue
        match = _COMMAND.match(text)
        if match is None:
            commands = False
            break
        if len(refs) >= MAX_REFS:
            more = True
            continue
        refs.append(RefUpdate(match.group(3), match.group(1).lower(), match.group(2).lower()))
    subjects: tuple[str, ...] = ()
    complete = False
    if ended and commands:
        if "push-options" in capabilities:
            position = _skip_pkt_lines(body, position)
        subjects, complete = _commit_subjects(body, position)
    return PushSummary(
        refs=tuple(refs),
        capabilities=capabilities,
        commit_subjects=subjects,
        commits_complete=complete,
        refs_complete=ended and commands and not more,
    )


def is_empty_push(body: bytes) -> bool:
    """The body is exactly a flush packet: git's probe before a large push (it checks the
    credentials this way), which asks the server to change nothing."""
    return body == b"0000"


def _skip_pkt_lines(body: bytes, position: int) -> int:
    """Past the push options (pkt-lines up to a flush)."""
    while position + 4 <= len(body):
        try:
            length = int(body[position : position + 4], 16)
        except ValueError:
            return len(body)
        position += 4 if length == 0 else max(length, 4)
        if length == 0:
            break
    return position


def _commit_subjects(body: bytes, position: int) -> tuple[tuple[str, ...], bool]:
    if body[position : position + 4] != b"PACK" or len(body) < position + 12:
        return (), False
    version, count = struct.unpack(">II", body[position + 4 : position + 12])
    if version not in (2, 3):
        return (), False
    position += 12
    subjects: list[str] = []
    by_offset: dict[int, tuple[int, bytes]] = {}
    by_name: dict[bytes, tuple[int, bytes]] = {}
    for _ in range(count):
        if len(subjects) >= MAX_COMMITS or position >= len(body):
            return tuple(subjects), False
        start = position
        kind, size, position = _object_header(body, position)
        base: tuple[int, bytes] | None = None
        if kind == _OFS_DELTA:
            distance, position = _offset(body, position)
            base = by_offset.get(start - distance)
        elif kind == _REF_DELTA:
            base = by_name.get(body[position : position + 20])
            position += 20
        elif kind not in (_COMMIT, _TAG):
            # Past the commits: the rest is trees and blobs, not worth inflating. A pack
            # git writes puts commits first.
            return tuple(subjects), kind in (_TREE, _BLOB)
        if size > MAX_COMMIT_BYTES or (kind in (_OFS_DELTA, _REF_DELTA) and base is None):
            return tuple(subjects), False  # too big, or a delta on a base it does not carry
        data, position = _inflate(body, position, size)
        if data is None:
            return tuple(subjects), False
        if base is not None:
            kind, data = base[0], _apply_delta(base[1], data)
            if data is None:
                return tuple(subjects), False
        by_offset[start] = (kind, data)
        name = b"commit" if kind == _COMMIT else b"tag"
        by_name[hashlib.sha1(b"%s %d\0" % (name, len(data)) + data).digest()] = (kind, data)
        if kind == _COMMIT:
            subjects.append(_subject(data))
    return tuple(subjects), True


def _inflate(body: bytes, position: int, size: int) -> tuple[bytes | None, int]:
    inflater = zlib.decompressobj()
    window = body[position : position + size * 2 + 1024]
    try:
        data = inflater.decompress(window, size + 1)
    except zlib.error:
        return None, position
    if not inflater.eof or len(data) != size:
        return None, position
    return data, position + len(window) - len(inflater.unused_data)


def _offset(body: bytes, position: int) -> tuple[int, int]:
    """An OFS_DELTA's distance back to its base (git's own varint, with its +1 per byte)."""
    if position >= len(body):
        return -1, position
    byte = body[position]
    position += 1
    distance = byte & 0x7F
    while byte & 0x80:
        if position >= len(body) or distance > 1 << 40:
            return -1, position
        byte = body[position]
        position += 1
        distance = ((distance + 1) << 7) | (byte & 0x7F)
    return distance, position


def _apply_delta(base: bytes, delta: bytes) -> bytes | None:
    """Git's delta format: base size, result size, then copy/insert instructions."""
    base_size, position = _size(delta, 0)
    result_size, position = _size(delta, position)
    if base_size != len(base) or result_size > MAX_COMMIT_BYTES:
        return None
    out = bytearray()
    while position < len(delta):
        op = delta[position]
        position += 1
        if op & 0x80:
            offset = length = 0
            for bit in range(4):
                if op & (1 << bit):
                    offset |= delta[position] << (8 * bit) if position < len(delta) else 0
                    position += 1
            for bit in range(3):
                if op & (1 << (4 + bit)):
                    length |= delta[position] << (8 * bit) if position < len(delta) else 0
                    position += 1
            length = length or 0x10000
            if offset + length > len(base):
                return None
            out += base[offset : offset + length]
        elif op:
            out += delta[position : position + op]
            position += op
        else:
            return None
        if len(out) > result_size:
            return None
    return bytes(out) if len(out) == result_size else None


def _size(data: bytes, position: int) -> tuple[int, int]:
    size = shift = 0
    while position < len(data) and shift < 64:
        byte = data[position]
        position += 1
        size |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    return size, position


def _object_header(body: bytes, position: int) -> tuple[int, int, int]:
    """(type, inflated size, position after the header) of the pack object at ``position``;
    type 0 when the header runs past the bytes."""
    if position >= len(body):
        return 0, 0, position
    byte = body[position]
    kind, size, shift = (byte >> 4) & 7, byte & 15, 4
    position += 1
    while byte & 0x80:
        if position >= len(body) or shift > 60:
            return 0, 0, position
        byte = body[position]
        size |= (byte & 0x7F) << shift
        shift += 7
        position += 1
    return kind, size, position


def _subject(commit: bytes) -> str:
    _, _, message = commit.partition(b"\n\n")
    first = message.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    first = "".join(ch if ch.isprintable() else "?" for ch in first)
    return first if len(first) <= MAX_SUBJECT_CHARS else first[: MAX_SUBJECT_CHARS - 1] + "…"


def pkt_line(data: bytes) -> bytes:
    return b"%04x" % (len(data) + 4) + data


def refusal_report(summary: PushSummary, reason: str) -> bytes | None:
    """A receive-pack answer rejecting every ref with ``reason``, so git prints
    ``! [remote rejected] main -> main (reason)`` and exits non-zero (a bare 403 on the POST
    shows only "RPC failed; HTTP 403"). None when the client asked for no status report."""
    if not summary.refs or not {"report-status", "report-status-v2"} & set(summary.capabilities):
        return None
    cleaned = " ".join(reason.split())[:300] or "refused"
    report = pkt_line(b"unpack ok\n")
    for ref in summary.refs:
        report += pkt_line(f"ng {ref.ref} {cleaned}\n".encode())
    report += b"0000"
    band = {"side-band-64k", "side-band"} & set(summary.capabilities)
    if not band:
        return report
    chunk = 65515 if "side-band-64k" in band else 995
    wrapped = pkt_line(b"\x02" + f"{cleaned}\n".encode())  # git shows it as "remote: ..."
    for start in range(0, len(report), chunk):
        wrapped += pkt_line(b"\x01" + report[start : start + chunk])
    return wrapped + b"0000"
