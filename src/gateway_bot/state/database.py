"""One database for every owner of state (the core, each channel), with writes serialised.

All coroutines share one aiosqlite connection (one writer). Without a lock, a coroutine's
single-statement write could land inside another coroutine's open ``BEGIN IMMEDIATE`` (and
vanish with its ROLLBACK), and two transactions could try to begin at once ("cannot start
a transaction within a transaction"). Every write goes through ``write``, ``write_many``,
``write_batch`` or ``transaction``, which take the same lock. Reads need no lock.

Owners share the file, not their schemas: each owner ("core", "matrix", "slack", ...) has
its own append-only migrations, applied by ``migrate`` and counted in ``schema_versions``,
and its own tables (a channel's are prefixed with its name). A channel's store uses only
this class's methods (never the aiosqlite connection), so a PostgreSQL ``Database`` with the
same methods can take its place; AGENTS.md lists what such a backend must translate.

Retention: an owner registers a pruner (``add_pruner``); the daemon calls ``prune`` at start
and daily, and each owner deletes what it keeps only for a while.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite

log = logging.getLogger(__name__)

Params = Iterable[Any]

Pruner = Callable[[float], Awaitable[int]]
"""Deletes (or empties) what its owner keeps only until the given time (epoch seconds);
returns how many rows it touched. Must be safe to run at any moment, repeatedly."""

_BUSY_ATTEMPTS = 25
"""About 10 s of tries in all for a write another process keeps from its lock."""

_OWNER = re.compile(r"[a-z][a-z0-9_]{0,31}")

_VERSIONS_TABLE = """
    CREATE TABLE IF NOT EXISTS schema_versions (
        owner TEXT PRIMARY KEY,
        version INTEGER NOT NULL
    )
"""


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer gateway-bot than this one."""


class Database:
    def __init__(self) -> None:
        self._connection: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()
        self._migrating = asyncio.Lock()
        self._pruners: dict[str, Pruner] = {}

    @property
    def connection(self) -> aiosqlite.Connection:
        if self._connection is None:
            raise RuntimeError("store is not open")
        return self._connection

    @property
    def is_open(self) -> bool:
        return self._connection is not None

    def attach(self, connection: aiosqlite.Connection | None) -> None:
        self._connection = connection

    async def open(self, path: Path) -> None:
        """WAL (readers never wait for the writer), FULL sync ("written" means "on disk"),
        foreign keys on, and a busy timeout for a second process (``gateway-bot status``)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        connection = await aiosqlite.connect(path, isolation_level=None)
        connection.row_factory = aiosqlite.Row
        try:
            await connection.execute("PRAGMA journal_mode=WAL")
            await connection.execute("PRAGMA synchronous=FULL")
            await connection.execute("PRAGMA foreign_keys=ON")
            await connection.execute("PRAGMA busy_timeout=5000")
        except BaseException:
            await connection.close()
            raise
        self._connection = connection

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()

    # -- reads and writes ------------------------------------------------------------------

    async def fetch_one(self, sql: str, params: Params = ()) -> aiosqlite.Row | None:
        async with self.connection.execute(sql, tuple(params)) as cursor:
            row: aiosqlite.Row | None = await cursor.fetchone()
            return row

    async def fetch_all(self, sql: str, params: Params = ()) -> list[aiosqlite.Row]:
        async with self.connection.execute(sql, tuple(params)) as cursor:
            return list(await cursor.fetchall())

    async def write(self, sql: str, params: Params = ()) -> int:
        """One statement in its own (auto-committed) transaction; returns the row count."""
        async with self._lock:
            cursor = await self._execute_when_free(sql, tuple(params))
            return cursor.rowcount

    async def write_many(self, sql: str, rows: Iterable[Params]) -> None:
        """One statement for each row, all in one transaction."""
        await self.write_batch([(sql, row) for row in rows])

    async def write_batch(self, statements: Sequence[tuple[str, Params]]) -> None:
        """Several statements that commit together or not at all, without handing out the
        connection (what a channel's store uses instead of ``transaction``)."""
        async with self.transaction() as connection:
            for sql, params in statements:
                await connection.execute(sql, tuple(params))

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """Several statements that commit together or not at all."""
        async with self._lock:
            await self._execute_when_free("BEGIN IMMEDIATE", ())
            try:
                yield self.connection
            except BaseException:
                await self.connection.execute("ROLLBACK")
                raise
            await self.connection.execute("COMMIT")

    async def _execute_when_free(self, sql: str, params: tuple[Any, ...]) -> aiosqlite.Cursor:
        """A write that may meet another process's (a second replica on this file, issue
        18). SQLite waits ``busy_timeout`` for a lock, but not when this connection has a
        read open from an older snapshot (a coroutine's SELECT between its steps, which
        aiosqlite interleaves with our write): that is SQLITE_BUSY at once. Nothing was
        written then, so the write is tried again once the read has moved on."""
        for attempt in range(_BUSY_ATTEMPTS):
            try:
                return await self.connection.execute(sql, params)
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == _BUSY_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(min(0.5, 0.005 * 2**attempt))
        raise AssertionError("unreachable")

    # -- schema ----------------------------------------------------------------------------

    async def schema_version(self, owner: str) -> int | None:
        """The owner's migrated version, or None when it never migrated here."""
        _check_owner(owner)
        exists = await self.fetch_one(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_versions'"
        )
        if exists is None:  # reads only, so a read-only connection can ask too
            return None
        row = await self.fetch_one("SELECT version FROM schema_versions WHERE owner = ?", (owner,))
        return int(row[0]) if row else None

    async def check_not_newer(self, owner: str, known: int) -> None:
        """Raise SchemaTooNew when ``owner`` is past the ``known`` versions of this code."""
        current = await self.schema_version(owner) or 0
        if current > known:
            raise SchemaTooNew(
                f"the state database has schema version {current} for {owner!r}, newer "
                f"than this gateway-bot knows ({known}): upgrade gateway-bot"
            )

    async def adopt_version(self, owner: str, version: int) -> None:
        """Record that ``owner``'s first ``version`` migrations are already applied, unless
        the owner has a recorded version already: how a database whose schema was tracked
        another way (the core's former ``PRAGMA user_version``) joins this table."""
        _check_owner(owner)
        await self.write(_VERSIONS_TABLE)
        await self.write(
            "INSERT INTO schema_versions (owner, version) VALUES (?, ?)"
            " ON CONFLICT (owner) DO NOTHING",
            (owner, int(version)),
        )

    async def migrate(self, owner: str, migrations: Sequence[str]) -> None:
        """Apply ``owner``'s pending migrations in order, each in its own transaction with
        the new version number, so a crash leaves the schema at a version, never between.

        ``migrations`` is append-only: entry N (from 1) moves the owner from version N-1 to
        N. A database at a higher version than the list knows is refused (SchemaTooNew):
        an older gateway-bot must not write into a schema it does not understand.
        """
        _check_owner(owner)
        await self.write(_VERSIONS_TABLE)
        async with self._migrating:  # two callers for one owner must not both apply N
            await self.check_not_newer(owner, len(migrations))
            current = await self.schema_version(owner) or 0
            for number, script in enumerate(migrations[current:], start=current + 1):
                await self._apply(owner, number, script)
                log.info("state: migrated %s to schema version %d", owner, number)

    async def _apply(self, owner: str, number: int, script: str) -> None:
        # executescript commits an open transaction before it runs, so BEGIN goes inside the
        # script; the owner name is checked against _OWNER, the version is an int.
        record = (
            f"INSERT INTO schema_versions (owner, version) VALUES ('{owner}', {number})"
            " ON CONFLICT (owner) DO UPDATE SET version = excluded.version;"
        )
        async with self._lock:
            connection = self.connection
            try:
                await connection.executescript(f"BEGIN IMMEDIATE;\n{script}\n;\n{record}\nCOMMIT;")
            except BaseException:
                if connection.in_transaction:
                    await connection.execute("ROLLBACK")
                raise

    # -- retention -------------------------------------------------------------------------

    def add_pruner(self, owner: str, pruner: Pruner) -> None:
        """Register what ``prune`` runs for ``owner`` (one pruner per owner; a second
        registration replaces the first)."""
        _check_owner(owner)
        self._pruners[owner] = pruner

    async def prune(self, before: float) -> dict[str, int]:
        """Run every owner's pruner; one owner's failure is logged and does not stop the
        others. Returns the rows each owner touched."""
        touched: dict[str, int] = {}
        for owner, pruner in list(self._pruners.items()):
            try:
                touched[owner] = await pruner(before)
            except Exception:
                log.exception("state: pruning %s failed; trying again at the next round", owner)
        return touched


def _check_owner(owner: str) -> None:
    if not _OWNER.fullmatch(owner):
        raise ValueError(f"owner {owner!r}: lower-case letters, digits and _ only")
