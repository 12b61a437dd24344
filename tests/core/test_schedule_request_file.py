"""The agent's ``outbox/schedule.json`` as hostile input, read the way the executor does:
a FIFO does not hang the daemon, a directory or a link is never read through, a file that
grows after it was measured is still capped, and each malformed shape says what is wrong."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from gateway_bot.core.schedules.request_file import (
    MAX_REQUEST_BYTES,
    BadRequest,
    RequestFile,
    ScheduleAsk,
    parse_request_file,
    take_request_file,
)
from gateway_bot.sandbox.host_files import HostContextFiles


def take(outbox: Path) -> RequestFile | None:
    """What the executor takes from this outbox, through the host sandbox's files."""
    elsewhere = outbox.parent / "not-this-test's"
    files = HostContextFiles(elsewhere, elsewhere, elsewhere, outbox, elsewhere)
    return asyncio.run(take_request_file(files))


def test_a_well_formed_request_is_read_and_removed(tmp_path: Path) -> None:
    (tmp_path / "schedule.json").write_text(
        json.dumps({"when": " every day at 9:00 ", "prompt": "check", "tz": "Europe/Berlin"})
    )
    assert take(tmp_path) == ScheduleAsk("every day at 9:00", "check", "Europe/Berlin")
    assert not (tmp_path / "schedule.json").exists()
    assert take(tmp_path) is None, "read once"


def test_a_fifo_is_refused_without_blocking_and_removed(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "schedule.json")
    found = take(tmp_path)
    assert isinstance(found, BadRequest)
    assert "not a regular file" in found.problem
    assert not (tmp_path / "schedule.json").exists()


def test_a_directory_is_refused_and_left(tmp_path: Path) -> None:
    (tmp_path / "schedule.json").mkdir()
    (tmp_path / "schedule.json" / "x").write_text("{}")
    found = take(tmp_path)
    assert isinstance(found, BadRequest)
    assert "not a regular file" in found.problem


def test_a_linked_outbox_is_not_entered(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere"
    real.mkdir()
    (real / "schedule.json").write_text(json.dumps({"when": "in 2 hours", "prompt": "x"}))
    (tmp_path / "outbox").symlink_to(real)
    assert take(tmp_path / "outbox") is None
    assert (real / "schedule.json").exists(), "nothing was read or removed through the link"


def test_the_size_cap_holds(tmp_path: Path) -> None:
    (tmp_path / "schedule.json").write_bytes(b" " * (MAX_REQUEST_BYTES + 1))
    found = take(tmp_path)
    assert isinstance(found, BadRequest)
    assert "more than the 16,384 allowed" in found.problem


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "one JSON object"),
        (b'{"when": "in 2 hours", "prompt": "x", "run_as": "root"}', "unknown keys run_as"),
        (b'{"prompt": "x"}', 'needs "when"'),
        (b'{"when": "in 2 hours", "prompt": "  "}', 'needs "prompt"'),
        (b'{"when": "in 2 hours", "prompt": "x", "tz": 3}', '"tz"'),
        (json.dumps({"when": "in 2 hours", "prompt": "x" * 4001}).encode(), "over 4000"),
    ],
)
def test_malformed_requests_say_what_is_wrong(data: bytes, says: str) -> None:
    found = parse_request_file(data)
    assert isinstance(found, BadRequest)
    assert says in found.problem
