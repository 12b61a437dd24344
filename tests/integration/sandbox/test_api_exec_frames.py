"""The REST exec's own parsing of what the agent controls: its output frames, taken apart
whatever the reads' boundaries (the process inside decides how its output is framed: every
write(2) is one frame), and the variables' names a repository's config hands it."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway_bot.sandbox.child import STDERR_LIMIT
from gateway_bot.sandbox.podman.api_exec import _Frames, exec_body
from gateway_bot.sandbox.podman.exec_env import ExecEnvError

Frame = tuple[int, bytes]


def _stream(frames: list[Frame]) -> bytes:
    return b"".join(struct.pack(">BxxxI", kind, len(data)) + data for kind, data in frames)


def _take(stream: bytes, cuts: list[int]) -> tuple[bytes, bytes]:
    parser, stderr, stdout = _Frames(), bytearray(), bytearray()
    edges = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    for start, end in itertools.pairwise(edges):
        stdout += parser.take(stream[start:end], stderr)
    return bytes(stdout), bytes(stderr)


@given(
    st.lists(st.tuples(st.sampled_from([1, 2]), st.binary(max_size=40)), max_size=30),
    st.lists(st.integers(min_value=0, max_value=2000), max_size=20),
)
def test_any_cut_of_the_stream_gives_the_same_stdout_and_stderr(
    frames: list[Frame], cuts: list[int]
) -> None:
    stdout, stderr = _take(_stream(frames), cuts)
    assert stdout == b"".join(data for kind, data in frames if kind == 1)
    assert stderr == b"".join(data for kind, data in frames if kind == 2)


def test_a_flood_of_one_byte_frames_keeps_stderr_bounded_and_stdout_whole() -> None:
    """The attack: 200,000 one-byte writes to stderr and some to stdout, read in 64 KiB
    pieces: stderr stops at its limit, stdout arrives whole and in order."""
    frames: list[Frame] = [(2, b"e")] * 200_000 + [(1, b"o%d" % i) for i in range(1000)]
    stdout, stderr = _take(_stream(frames), list(range(0, 2_000_000, 65536)))
    assert stderr == b"e" * STDERR_LIMIT
    assert stdout == b"".join(b"o%d" % i for i in range(1000))


@pytest.mark.parametrize("name", ["PATH\n", "A=B", "GWB_A=1 GWB_B", ""])
def test_a_variable_name_that_is_not_one_is_refused(name: str) -> None:
    """``^...$`` with ``match`` took "PATH\\n" (``$`` matches before a final newline)."""
    with pytest.raises(ExecEnvError):
        exec_body(["true"], {name: "x"}, "/workspace")
    assert exec_body(["true"], {"GWB_OK": "a\nb=c"}, "/workspace")["Env"] == ["GWB_OK=a\nb=c"]
