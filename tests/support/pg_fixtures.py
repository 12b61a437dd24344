"""A real PostgreSQL server for the state tests: Debian's binaries, one throw-away cluster
per session in a temp directory on 127.0.0.1 (a free port), a fresh database per test.

Root cannot run postgres, so as root the server runs as the ``postgres`` user (runuser);
its directory is made by us and handed to that user. Nothing is started unless a test
asks for PostgreSQL (``postgres_url`` or the ``state_target`` parameter "postgresql").
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

TEST_DATABASE = "gwtests"
"""The session's database; each test's state is a schema in it (``Databases``)."""


@dataclass(frozen=True)
class PostgresServer:
    port: int
    user: str

    def url(self, database: str) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    if not found:
        raise RuntimeError("PostgreSQL is not installed: run scripts/setup.d/55-postgresql.sh")
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _as_server_user(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@contextlib.contextmanager
def running_server() -> Iterator[PostgresServer]:
    """A throw-away server (and its ``TEST_DATABASE``) for the duration; the session's
    fixture, and the benchmarks (bench/replicas.py), which run outside pytest."""
    binaries = _bin_dir()
    home = Path(tempfile.mkdtemp(prefix="gwbt-postgres-"))
    data = home / "data"
    if os.geteuid() == 0:
        shutil.chown(home, "postgres", "postgres")
    subprocess.run(
        _as_server_user(
            [str(binaries / "initdb"), "-D", str(data), "-U", "gateway", "--auth=trust",
             "-E", "UTF8", "--no-sync", "--no-instructions"]
        ),
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    port = _free_port()
    options = (
        f"-p {port} -k {home} -c listen_addresses=127.0.0.1 -c fsync=off"
        " -c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
    )
    subprocess.run(
        _as_server_user(
            [str(binaries / "pg_ctl"), "-D", str(data), "-o", options,
             "-l", str(home / "server.log"), "-w", "-t", "120", "start"]
        ),
        check=True, capture_output=True, timeout=180,
    )  # fmt: skip
    server = PostgresServer(port, "gateway")
    try:
        with psycopg.connect(server.url("postgres"), autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {TEST_DATABASE}")
        yield server
    finally:
        subprocess.run(
            _as_server_user([str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate",
                             "-w", "stop"]),
            check=False, capture_output=True, timeout=120,
        )  # fmt: skip
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    with running_server() as server:
        yield server


_numbers = itertools.count(1)


class Databases:
    """Fresh, empty places for one test's state, dropped after it: each is a schema of its
    own in the session's test database, reached through a URL whose ``search_path`` names
    it (a schema costs a catalogue row; a database per test cost a copy of template0)."""

    def __init__(self, server: PostgresServer) -> None:
        self._server = server
        self._names: list[str] = []

    def fresh(self) -> str:
        """A new empty schema; a URL that works in it."""
        name = f"t{os.getpid()}_{next(_numbers)}"
        with psycopg.connect(self._server.url(TEST_DATABASE), autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA {name}")
        self._names.append(name)
        return f"{self._server.url(TEST_DATABASE)}?options=-csearch_path%3D{name}"

    def drop_all(self) -> None:
        with psycopg.connect(self._server.url(TEST_DATABASE), autocommit=True) as admin:
            for name in self._names:
                admin.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


@pytest.fixture
def postgres_databases(postgres_server: PostgresServer) -> Iterator[Databases]:
    made = Databases(postgres_server)
    yield made
    made.drop_all()


@pytest.fixture
def postgres_url(postgres_databases: Databases) -> str:
    """A fresh, empty PostgreSQL database for this test."""
    return postgres_databases.fresh()


StateTargets = Callable[[Path], "Path | str"]
"""Makes a new place for state: given a directory, a SQLite file in it or a fresh
PostgreSQL database."""


@pytest.fixture(params=["sqlite", "postgresql"])
def state_targets(request: pytest.FixtureRequest) -> StateTargets:
    """New places for state on one engine per parameter: the store contract runs on both."""
    if request.param == "sqlite":
        return lambda directory: directory / "state.db"
    databases: Databases = request.getfixturevalue("postgres_databases")
    return lambda directory: databases.fresh()


@pytest.fixture
def state_target(state_targets: StateTargets, tmp_path: Path) -> Path | str:
    """Where a store under test keeps its state: ``<tmp>/state.db``, or a fresh database
    on the session's PostgreSQL server."""
    return state_targets(tmp_path)
