"""The daemon's status snapshot: written atomically and privately, refreshed when a
channel's health changes, and read back with a clear word when its daemon is gone."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway_bot.core.live_state import ChannelView
from gateway_bot.core.status.snapshot import (
    Snapshot,
    SnapshotWriter,
    not_running_note,
    read_snapshot,
    write_snapshot,
)
from gateway_bot.sandbox.base import SandboxContainer


class Live:
    def __init__(self) -> None:
        self.health = "connected"
        self.listed = 0

    def channels(self) -> list[ChannelView]:
        return [ChannelView("console", self.health, "")]

    async def containers(self) -> list[SandboxContainer]:
        self.listed += 1
        return [SandboxContainer("gwb-abcd1234", "abcd1234", "running")]


def snapshot(pid: int, **more: object) -> Snapshot:
    fields: dict[str, object] = {
        "pid": pid,
        "started_at": time.time() - 60,
        "written_at": time.time(),
        "stopped_at": None,
        "sandbox": "none",
        "channels": (ChannelView("console", "connected", ""),),
        "containers": (),
        "containers_error": "",
        **more,
    }
    return Snapshot(**fields)  # type: ignore[arg-type]


@pytest.fixture
def daemon_like() -> Iterator[subprocess.Popen[bytes]]:
    """A live process whose command line names gateway-bot, as the daemon's does."""
    process = subprocess.Popen(
        [sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()",
         "gateway-bot"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    assert process.stdout.readline() == b"up\n"
    yield process
    process.kill()
    process.wait()


def test_written_atomically_and_readable_only_by_its_owner(tmp_path: Path) -> None:
    path = tmp_path / "daemon-status.json"
    written = snapshot(1234)
    write_snapshot(path, written)
    write_snapshot(path, written)  # replacing works too
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_snapshot(path) == written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["daemon-status.json"]


def test_a_live_daemon_gets_no_note(tmp_path: Path, daemon_like: subprocess.Popen[bytes]) -> None:
    assert not_running_note(snapshot(daemon_like.pid), time.time()) == ""


def test_a_dead_pid_says_no_daemon_is_running(tmp_path: Path) -> None:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    note = not_running_note(snapshot(int(ended.stdout)), time.time())
    assert note.startswith("No daemon is running (pid ")
    assert "is gone" in note


def test_a_reused_pid_is_not_taken_for_the_daemon() -> None:
    other = subprocess.Popen(["sleep", "600"])
    try:
        while not Path(f"/proc/{other.pid}/cmdline").read_bytes().startswith(b"sleep"):
            time.sleep(0.01)
        note = not_running_note(snapshot(other.pid), time.time())
    finally:
        other.kill()
        other.wait()
    assert note.startswith("No daemon is running"), "a live process that is not gateway-bot"


def test_a_stopped_daemon_and_a_missing_snapshot(tmp_path: Path) -> None:
    stopped = not_running_note(snapshot(1, stopped_at=time.time()), time.time())
    assert stopped.startswith("No daemon is running (pid 1 stopped at ")
    assert not_running_note(None, time.time()).startswith("No daemon is running")
    assert read_snapshot(tmp_path / "absent.json") is None


def test_a_stuck_daemon_is_named(daemon_like: subprocess.Popen[bytes]) -> None:
    old = snapshot(daemon_like.pid, written_at=time.time() - 3600)
    note = not_running_note(old, time.time())
    assert note.startswith(f"The daemon (pid {daemon_like.pid}) has not updated its status")


async def test_the_writer_follows_health_and_leaves_a_stopped_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "daemon-status.json"
    live = Live()
    writer = SnapshotWriter(path, live, "podman")
    writer.start()
    try:
        first = await until(lambda: read_snapshot(path))
        assert [c.health for c in first.channels] == ["connected"]
        assert [c.name for c in first.containers] == ["gwb-abcd1234"]
        assert first.pid == os.getpid()
        assert first.stopped_at is None

        live.health = "degraded"
        changed = await until(
            lambda: (s := read_snapshot(path)) and s.channels[0].health == "degraded" and s
        )
        assert changed.sandbox == "podman"
    finally:
        await writer.stop()
    last = read_snapshot(path)
    assert last is not None
    assert last.stopped_at is not None
    assert not_running_note(last, time.time()).startswith("No daemon is running")


async def until(check, within_s: float = 20.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within_s
    while not (found := check()):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)
    return found
