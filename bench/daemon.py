"""The real daemon for a benchmark: ``gateway-bot run`` in a subprocess, its output in a
file (a pipe nobody reads would block it), optionally traced (bench/traced_daemon.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import gateway_env

TRIVIAL_AGENT = Path(__file__).with_name("trivial-agent.sh")


def trivial_agent(**more: object) -> dict[str, object]:
    """The ``agent`` config section of a trivial agent on the host (no warm session)."""
    return {"command": ["/bin/sh", str(TRIVIAL_AGENT)], "max_warm_sessions": 0,
            "timeout_seconds": 60, **more}  # fmt: skip


def _installed_env() -> dict[str, str]:
    """The tests' environment as an installed daemon has it: bytecode is cached. Sessions
    here set PYTHONDONTWRITEBYTECODE, which made every benchmarked start compile its
    imports from source (about twice the import time; AGENTS.md, Gotchas)."""
    env = gateway_env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


class Daemon:
    def __init__(
        self, config: Path, log: Path, trace: Path | None = None, checkout: Path | None = None
    ) -> None:
        """``checkout``: run another checkout's code (its own ``.venv``, e.g. main's beside
        a branch, for a before/after in one run) instead of this one's."""
        module = ["-m", "bench.traced_daemon", str(trace)] if trace else ["-m", "gateway_bot"]
        python = str(checkout / ".venv" / "bin" / "python") if checkout else sys.executable
        self.log = log
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [python, *module, "run", "--config", str(config)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=_installed_env(), cwd=checkout or Path(__file__).parent.parent,
            )  # fmt: skip

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL: what a crash or an OOM kill does."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()

    def rss_mb(self) -> float:
        """Resident memory of the daemon process itself (VmRSS)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")


def spawn_floor(module: str, *args: str) -> subprocess.Popen[str]:
    """A floor's minimal bot (``bench.minimal_*``) in its own process, once it says ready."""
    process = subprocess.Popen(
        [sys.executable, "-m", module, *args], stdout=subprocess.PIPE, text=True,
        cwd=Path(__file__).parent.parent,
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if line != "ready":
        process.kill()
        raise RuntimeError(f"{module} did not start: {line!r}")
    return process
