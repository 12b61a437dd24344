"""Shared fixtures: the fake model API (one per session), target git repos, configs, and a
driver for the real ``gateway-bot`` process talked to through pipes as a user would."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import settings as hypothesis_settings

from tests.support.fake_anthropic import FakeAnthropic

# Property tests explore the same examples on every run: CI never turns red on a draw it
# never saw before (a new finding comes from a developer's run with HYPOTHESIS_PROFILE=explore).
hypothesis_settings.register_profile("ci", derandomize=True, deadline=None)
hypothesis_settings.register_profile("explore", deadline=None)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

pytest_plugins: list[str] = [
    "tests.support.synapse_fixtures",
    "tests.support.fake_slack",
    "tests.support.sandbox_fixtures",
    "tests.support.email_fixtures",
    "tests.support.pg_fixtures",
    "tests.support.hang_report",
]

GIT_IDENTITY = ["-c", "user.name=Test", "-c", "user.email=test@example.test"]


@pytest.fixture(scope="session")
def fake_api_server() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fake_api(fake_api_server: FakeAnthropic) -> Iterator[FakeAnthropic]:
    fake_api_server.reset()
    yield fake_api_server
    fake_api_server.release()
    fake_api_server.reset()


def make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A git repo with one commit on main holding ``files``."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    for name, text in {"README.md": "# target repo\n", **(files or {})}.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    subprocess.run(["git", "-C", str(path), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(path), *GIT_IDENTITY, "commit", "-q", "-m", "init"], check=True
    )
    return path


@pytest.fixture
def target_repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def write_config(directory: Path, repo: Path, api: FakeAnthropic, **sections: Any) -> Path:
    """A server config pointing at ``repo`` and the fake API; ``sections`` override keys."""
    config: dict[str, Any] = {
        "state_dir": str(directory / "state"),
        "repo": {"url": str(repo)},
        "agent": {
            "timeout_seconds": 120,
            "env": {
                "ANTHROPIC_BASE_URL": api.base_url,
                "ANTHROPIC_API_KEY": "test-key",
                "CLAUDE_CODE_MAX_RETRIES": "0",
            },
        },
        "channels": {"console": {}},
        "sandbox": {"kind": "none"},  # host mode keeps channel/core tests fast; see test_sandbox*
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    path = directory / "gateway-bot.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def config_path(tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic) -> Path:
    return write_config(tmp_path, target_repo, fake_api)


def gateway_env() -> dict[str, str]:
    """The test process's environment minus anything that would reach a real model."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE"))}
    env["PYTHONUNBUFFERED"] = "1"
    return env


class GatewayProcess:
    """The real ``gateway-bot`` CLI in a subprocess; stdout read line by line on a thread."""

    def __init__(
        self, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gateway_bot", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**gateway_env(), **(env or {})},
            cwd=cwd,
        )
        self.lines: list[str] = []
        self._cursor = 0
        self._eof = False
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._stderr.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def send(self, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()

    def close_input(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()

    def expect(self, pattern: str, timeout: float = 60) -> str:
        """Wait for the next output line matching ``pattern`` (after the last match);
        fail with everything seen so far."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            while self._cursor < len(self.lines):
                line = self.lines[self._cursor]
                self._cursor += 1
                if regex.search(line):
                    return line
            if self._eof or not self._next_line(deadline):
                break
        raise AssertionError(
            f"no line matching {pattern!r}; stdout:\n"
            + "\n".join(self.lines)
            + f"\nstderr:\n{self.stderr}"
        )

    def _next_line(self, deadline: float) -> bool:
        """Move one line from the reader into ``lines``; False on timeout or end of output."""
        try:
            item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return False
        if item is None:
            self._eof = True
            return False
        self.lines.append(item)
        return True

    def count(self, pattern: str) -> int:
        regex = re.compile(pattern)
        return sum(1 for line in self.lines if regex.search(line))

    def finish(self) -> None:
        """End input as a user pressing Ctrl-D does; the process must then exit cleanly."""
        self.close_input()
        assert self.wait() == 0, self.stderr

    def wait(self, timeout: float = 60) -> int:
        code = self.process.wait(timeout)
        self.drain()
        return code

    def drain(self) -> list[str]:
        """Collect remaining output (the process has ended)."""
        while not self._eof:
            try:
                line = self._queue.get(timeout=5)
            except queue.Empty:
                break
            if line is None:
                self._eof = True
                break
            self.lines.append(line)
        return self.lines

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self.drain()

    def terminate(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)


@pytest.fixture
def gateway() -> Iterator[Any]:
    """Start gateway-bot processes; all are killed at the end of the test."""
    started: list[GatewayProcess] = []

    def start(
        *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> GatewayProcess:
        """``env``: more variables for the process (a test hook such as the schedules'
        clock, ``core/schedules/test_clock.py``)."""
        process = GatewayProcess(*args, cwd=cwd, env=env)
        started.append(process)
        return process

    yield start
    for process in started:
        process.terminate()


# ----- the session leaves nothing behind ---------------------------------------------------

_SESSION_TEMP: list[Path] = []
LABEL_DEPLOYMENT = "gateway-bot.deployment"


@pytest.fixture(scope="session", autouse=True)
def _session_temp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's base temp directory: what its processes work in, for the end check."""
    base = tmp_path_factory.getbasetemp()
    _SESSION_TEMP.append(base)
    return base


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when this session left something running: a container or network of
    its deployments, or a process it started (gateway-bot, claude, synapse, dovecot...).
    The podman service the daemons under test started on the session's socket outlives
    them by design (as for `run`); the session stops it here first. Other sessions on the
    same host are never looked at: only this session's labels, children and temp dir."""
    from tests.support.sandbox_fixtures import SESSION_PODMAN, podman

    if session.config.pluginmanager.has_plugin("dsession"):
        return  # pytest-xdist's controller: each worker is a session and checks itself
    if SESSION_PODMAN.socket is not None:
        service = f"unix://{SESSION_PODMAN.socket}"
        _end_processes(live_processes(lambda pid, argv: service in argv))
    base = str(_SESSION_TEMP[0]) if _SESSION_TEMP else None
    descendants = _descendants(os.getpid())
    processes = live_processes(lambda pid, argv: pid in descendants or _works_in(pid, argv, base))
    containers: list[str] = []
    networks: list[str] = []
    if SESSION_PODMAN.deployments or SESSION_PODMAN.networks:
        listed = json.loads(podman("ps", "-a", "--format", "json", check=False).stdout or "[]")
        containers = [
            entry["Names"][0]
            for entry in listed
            if (entry.get("Labels") or {}).get(LABEL_DEPLOYMENT) in SESSION_PODMAN.deployments
        ]
        listed = json.loads(podman("network", "ls", "--format", "json", check=False).stdout or "[]")
        networks = [
            entry["name"]
            for entry in listed
            if (entry.get("labels") or {}).get(LABEL_DEPLOYMENT) in SESSION_PODMAN.deployments
            or entry["name"] in SESSION_PODMAN.networks
        ]
    left = [f"process {pid}: {argv[:200]}" for pid, argv in processes.items()]
    left += [f"container {name}" for name in containers]
    left += [f"podman network {name}" for name in networks]
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write("\n")
    for line in ["FAILED: the test session left these behind (now removed):", *left]:
        if reporter is not None:
            reporter.write_line(line, red=True)
        else:
            print(line, file=sys.stderr)
    _end_processes(processes)
    if containers:
        podman("rm", "-f", "-t", "0", *containers, check=False)
    if networks:
        podman("network", "rm", "-f", *networks, check=False)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _works_in(pid: int, argv: str, base: str | None) -> bool:
    """Working in (or naming) the session's temp dir: how orphans are found (a setsid'd
    service, an agent whose daemon was killed), which are no longer our descendants."""
    if base is None:
        return False
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = ""
    named = re.search(re.escape(base) + r"(/|\s|$)", argv) is not None  # not pytest-51 for -5
    return named or cwd == base or cwd.startswith(base + "/")


def _stat_fields(pid: int | str) -> list[str]:
    """/proc/PID/stat after the command name: [state, ppid, ...]; [] when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _descendants(root: int) -> set[int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat_fields(entry.name)):
            parents[int(entry.name)] = int(fields[1])
    found, grew = {root}, True
    while grew:
        grown = found | {pid for pid, parent in parents.items() if parent in found}
        grew, found = grown != found, grown
    return found - {root}


def _alive(pid: int) -> bool:
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] != "Z"


def live_processes(select: Any) -> dict[int, str]:
    """Live processes (not zombies, not this one or its parent) that ``select(pid, argv)``
    picks, with their command lines."""
    spared = {os.getpid(), os.getppid()}
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in spared or not _alive(int(entry.name)):
            continue
        try:
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except (OSError, UnicodeDecodeError):
            continue
        if argv and select(int(entry.name), argv):
            found[int(entry.name)] = argv
    return found


def _end_processes(found: dict[int, str]) -> None:
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in found):
        time.sleep(0.1)
    for pid in found:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
async def state_database(tmp_path: Path) -> Any:
    """An open shared state database (``<tmp>/state.db``), as the daemon hands to channels
    built without one: their stores migrate their own tables in it on first use."""
    from gateway_bot.state.database import Database

    database = Database()
    await database.open(tmp_path / "state.db")
    yield database
    await database.close()


TIERS = ("faults", "integration", "security", "browser", "properties", "core", "unit")
"""The folders of tests/, each a marker of its tests (``-m unit``, ``-m "not browser"``), in
the order a run starts them: whole files go to one xdist worker, the heaviest first, so
none is left for the end. A file marked ``slow`` goes before its tier's others."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests_dir = Path(__file__).resolve().parent
    for item in items:
        relative = item.path.resolve().relative_to(tests_dir)
        tier = relative.parts[0] if relative.parts[0] in TIERS else "unit"
        item.add_marker(getattr(pytest.mark, tier))
    items.sort(key=_start_order)


def _start_order(item: pytest.Item) -> tuple[bool, int]:
    tier = next(m.name for m in item.iter_markers() if m.name in TIERS)
    return (item.get_closest_marker("slow") is None, TIERS.index(tier))
