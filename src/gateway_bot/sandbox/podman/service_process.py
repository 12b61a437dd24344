"""The local podman REST service's own process: started when nothing answers on its socket,
ended again by the process that started it when that one leaves nothing running (``chat``).

The service is podman's own ``podman system service``, started in its own session so it
outlives the daemon (containers never depend on it: conmon supervises them) and exits by
itself after ten idle minutes. A configured host's service is someone else's: never
started nor stopped here.

Split from ``service.py``, which decides when a service must be started (nothing answers)
and makes the calls to it: this module only runs and ends the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

from gateway_bot.sandbox.base import SandboxUnavailable

log = logging.getLogger(__name__)

SERVICE_IDLE_SECONDS = 600


@dataclasses.dataclass
class ServiceProcess:
    """``podman system service`` on ``socket``, run by ``executable`` with ``runtime``."""

    executable: str
    runtime: str | None
    socket: Path
    log_dir: Path
    _started_argv: list[str] | None = dataclasses.field(default=None, init=False)
    """The argv of the service this process started, if it did (``chat`` stops it)."""

    async def start(self, env: Mapping[str, str], answers: Callable[[], Awaitable[bool]]) -> None:
        """Start the service with the podman CLI's environment ``env``; return once
        ``answers`` says it does (SandboxUnavailable, with its log's last lines, if it does
        not within 30 s)."""
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()  # stale: nothing answered on it
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / "podman-service.log"
        argv = [self.executable]
        if self.runtime:
            argv.append(f"--runtime={self.runtime}")
        argv += ["system", "service", f"--time={SERVICE_IDLE_SECONDS}", f"unix://{self.socket}"]
        log.info("starting the podman service: %s", " ".join(argv))
        # setsid --fork: the service is not our child, so neither our exit (asyncio kills
        # running children it still holds) nor a kill -9 of the daemon touches it.
        with log_path.open("ab") as log_file:
            launcher = await asyncio.create_subprocess_exec(
                "setsid",
                "--fork",
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                env=env,
                # Not the daemon's directory: the service outlives it, and once that
                # directory is gone every container start fails (conmon, netavark: "No such
                # file or directory"), for every daemon that uses the service after.
                cwd="/",
            )
            await launcher.wait()
        self._started_argv = argv
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if await answers():
                return
            await asyncio.sleep(0.1)
        tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
        raise SandboxUnavailable(
            f"the podman service did not answer on {self.socket}: {' / '.join(tail) or 'no output'}"
        )

    async def stop_if_started_here(self) -> None:
        """End the service this process started (``chat`` leaves nothing running); a service
        that already answered is someone else's and stays. Found by its exact argv, which
        names our socket: ``setsid --fork`` leaves no child of ours to hold on to."""
        if self._started_argv is None:
            return
        argv, self._started_argv = self._started_argv, None
        pids = await asyncio.to_thread(_pids_running, argv)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while pids and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            pids = await asyncio.to_thread(_pids_running, argv)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        log.info("stopped the podman service this process started (%s)", self.socket)


def _pids_running(argv: Sequence[str]) -> list[int]:
    """Live processes whose command line is exactly ``argv`` (zombies excluded)."""
    wanted = b"\0".join(arg.encode() for arg in argv) + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "cmdline").read_bytes() != wanted:
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            found.append(int(entry.name))
    return found
