"""The daemon's status snapshot: what only its memory holds (channel health; the sandbox's
containers as it last listed them, which ``gateway-bot status`` asks podman for itself:
docs/decisions/0122-status-asks-podman-now.md), written to ``<state>/daemon-status.json``.

Why a file and not a socket: ``status`` must answer also when the daemon is gone (and say
so), and a file needs no listener, no port and no authentication beyond the state
directory's own permissions. Tasks, approvals and conversations are not in it: ``status``
reads them from the state database, which is always current.

The file is replaced atomically (written beside it, 0600, then renamed), carries the pid
and the time, and is refreshed on every health change (polled each ``POLL_S``) and at least
every ``REFRESH_S``. A daemon that stops writes a last one with ``stopped_at``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway_bot.core.live_state import ChannelView, LiveState
from gateway_bot.sandbox.base import SandboxContainer

log = logging.getLogger(__name__)

FILE_NAME = "daemon-status.json"
FORMAT = 1
POLL_S = 1.0
REFRESH_S = 5.0
STALE_S = 30.0
"""A running daemon rewrites the file every REFRESH_S; older than this, it is stuck."""


@dataclass(frozen=True)
class Snapshot:
    pid: int
    started_at: float
    written_at: float
    stopped_at: float | None
    sandbox: str
    channels: tuple[ChannelView, ...]
    containers: tuple[SandboxContainer, ...]
    containers_error: str

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "pid": self.pid,
            "started_at": self.started_at,
            "written_at": self.written_at,
            "stopped_at": self.stopped_at,
            "sandbox": self.sandbox,
            "channels": [
                {"name": c.name, "health": c.health, "message": c.message} for c in self.channels
            ],
            "containers": [
                {"name": c.name, "context_id": c.context_id, "state": c.state, "host": c.host}
                for c in self.containers
            ],
            "containers_error": self.containers_error,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Snapshot:
        return cls(
            pid=int(data["pid"]),
            started_at=float(data["started_at"]),
            written_at=float(data["written_at"]),
            stopped_at=None if data.get("stopped_at") is None else float(data["stopped_at"]),
            sandbox=str(data.get("sandbox", "")),
            channels=tuple(
                ChannelView(str(c["name"]), str(c["health"]), str(c.get("message", "")))
                for c in data.get("channels", [])
            ),
            containers=tuple(
                SandboxContainer(
                    str(c["name"]),
                    str(c["context_id"]),
                    str(c["state"]),
                    host=None if c.get("host") is None else str(c["host"]),
                )
                for c in data.get("containers", [])
            ),
            containers_error=str(data.get("containers_error", "")),
        )


def snapshot_path(state_dir: Path) -> Path:
    return state_dir / FILE_NAME


def write_snapshot(path: Path, snapshot: Snapshot) -> None:
    """Atomic replace: a reader sees the old file or the new one, never half of one."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(snapshot.to_json(), handle)
    os.replace(partial, path)


def read_snapshot(path: Path) -> Snapshot | None:
    """None when there is no snapshot or it cannot be read (a different format)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Snapshot.from_json(data)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("cannot read %s: %s", path, exc)
        return None


def daemon_alive(pid: int) -> bool:
    """Is ``pid`` a live gateway-bot process? (Its command line names gateway, so a reused
    pid does not pass for the daemon.)"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, someone else's: checked by its command line below
    proc = Path(f"/proc/{pid}")
    try:
        state = proc.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0]
        cmdline = proc.joinpath("cmdline").read_bytes()
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        return True  # no /proc to ask: trust the signal check
    if state in ("Z", "X"):
        return False  # killed, not yet reaped by its parent
    return not cmdline or b"gateway" in cmdline  # empty: between fork and exec


def not_running_note(snapshot: Snapshot | None, now: float) -> str:
    """ "" when the snapshot's daemon runs; otherwise what to tell the reader."""
    if snapshot is None:
        return "No daemon is running (it never wrote a status snapshot here)."
    if snapshot.stopped_at is not None:
        stopped = reported_when(snapshot.stopped_at)
        return f"No daemon is running (pid {snapshot.pid} stopped at {stopped})."
    if not daemon_alive(snapshot.pid):
        return (
            f"No daemon is running (pid {snapshot.pid} is gone; its last status is from "
            f"{reported_when(snapshot.written_at)})."
        )
    if now - snapshot.written_at > STALE_S:
        return (
            f"The daemon (pid {snapshot.pid}) has not updated its status since "
            f"{reported_when(snapshot.written_at)}: it may be stuck."
        )
    return ""


def reported_when(at: float) -> str:
    """A snapshot's time as ``status`` shows it (local time, to the second)."""
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(at))


class SnapshotWriter:
    """The daemon's side: keeps the file current while it runs."""

    def __init__(self, path: Path, live: LiveState, sandbox: str) -> None:
        self._path = path
        self._live = live
        self._sandbox = sandbox
        self._started_at = time.time()
        self._containers: tuple[SandboxContainer, ...] = ()
        self._containers_error = ""
        self._task: asyncio.Task[None] | None = None

    async def write(self, *, stopped: bool = False, refresh_containers: bool = True) -> None:
        if refresh_containers and not stopped:
            try:
                self._containers = tuple(await self._live.containers())
                self._containers_error = ""
            except Exception as exc:  # reported in the snapshot; the daemon goes on
                self._containers_error = f"{type(exc).__name__}: {exc}"
        now = time.time()
        snapshot = Snapshot(
            pid=os.getpid(),
            started_at=self._started_at,
            written_at=now,
            stopped_at=now if stopped else None,
            sandbox=self._sandbox,
            channels=tuple(self._live.channels()),
            containers=self._containers,
            containers_error=self._containers_error,
        )
        try:
            await asyncio.to_thread(write_snapshot, self._path, snapshot)
        except OSError as exc:
            log.warning("cannot write the status snapshot %s: %s", self._path, exc)

    def start(self) -> None:
        self._task = asyncio.create_task(self._keep_current())

    async def _keep_current(self) -> None:
        await self.write()
        seen = self._live.channels()
        written = time.monotonic()
        while True:
            await asyncio.sleep(POLL_S)
            try:
                now_seen = self._live.channels()
                due = time.monotonic() - written >= REFRESH_S
                if now_seen != seen or due:
                    # A health change goes out at once; containers are listed on schedule.
                    await self.write(refresh_containers=due)
                    seen, written = now_seen, time.monotonic() if due else written
            except Exception:
                log.exception("the status snapshot could not be refreshed")

    async def stop(self) -> None:
        """Stop refreshing; leave a last snapshot saying the daemon stopped."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.write(stopped=True)
