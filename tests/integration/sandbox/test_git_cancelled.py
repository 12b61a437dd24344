"""A task cancelled while the daemon's git runs for it (/stop, shutdown, a task timeout
during the mirror's fetch) leaves no git behind, nor anything git started: a fetch left
running holds the mirror's lock files and its ssh connection for as long as it likes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway_bot.sandbox.host_commands import run_git

MARK = "GWB_TEST_GIT_CANCEL"


def marked_processes(token: str) -> dict[int, str]:
    """Live processes whose environment carries ``MARK=token`` (git and all it started
    inherit it), with their command lines."""
    wanted = f"{MARK}={token}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            state = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[0]
            if state != b"Z" and wanted in (entry / "environ").read_bytes().split(b"\0"):
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
    return {pid: argv.decode(errors="replace").strip() for pid, argv in found.items()}


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A mark in the environment the daemon's git inherits; what still carries it at the
    end is killed (a failing run must not leave a 300 s sleep behind)."""
    made = uuid.uuid4().hex
    monkeypatch.setenv(MARK, made)
    yield made
    for pid in marked_processes(made):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def wait_for(check: object, what: str, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_a_cancelled_git_is_killed_with_what_it_started(token: str, tmp_path: Path) -> None:
    # A command that blocks as a stuck fetch does, through a shell as git's helpers run.
    command = asyncio.create_task(
        run_git("-C", str(tmp_path), "-c", "alias.hang=!sleep 300; :", "hang")
    )
    await wait_for(
        lambda: any(argv.startswith("sleep") for argv in marked_processes(token).values()),
        "git's alias to start its sleep",
    )
    command.cancel()
    await asyncio.wait([command], timeout=30)
    assert command.cancelled(), "the cancelled command did not end"
    await wait_for(
        lambda: not marked_processes(token),
        f"git and its children to be gone (left: {marked_processes(token)})",
    )
