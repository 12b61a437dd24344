"""The SQLite engine: one aiosqlite connection (one writer), WAL, FULL sync.

aiosqlite runs the blocking sqlite3 calls on its own thread, so the event loop never waits
on disk. All coroutines share the connection, so ``Database`` serialises writes and
transactions with one lock (``needs_write_lock``).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiosqlite

from gateway_bot.state.backend import Dialects, Migration, Params, Row

_BUSY_ATTEMPTS = 25
"""About 10 s of retries (backing off to 0.5 s) before "database is locked" is raised."""


class SqliteTransaction:
    def __init__(self, connection: aiosqlite.Connection) -> None:
        self._connection = connection

    async def fetch_one(self, sql: str, params: Params = ()) -> Row | None:
        async with self._connection.execute(sql, tuple(params)) as cursor:
            row: aiosqlite.Row | None = await cursor.fetchone()
            return row

    async def fetch_all(self, sql: str, params: Params = ()) -> list[Row]:
        async with self._connection.execute(sql, tuple(params)) as cursor:
            return list(await cursor.fetchall())

    async def execute(self, sql: str, params: Params = ()) -> int:
        async with self._connection.execute(sql, tuple(params)) as cursor:
            return cursor.rowcount


class SqliteBackend:
    dialect = "sqlite"
    needs_write_lock = True

    def __init__(self, connection: aiosqlite.Connection) -> None:
        self.connection = connection
        self._statements = SqliteTransaction(connection)

    @classmethod
    async def open(cls, path: Path) -> SqliteBackend:
        """WAL (readers never wait for the writer), FULL sync ("written" means "on disk"),
        foreign keys on, and a busy timeout for a second process (``gateway-bot status``)."""
        await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
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
        return cls(connection)

    @classmethod
    async def open_read_only(cls, path: Path) -> SqliteBackend:
        """No pragma that writes: for ``gateway-bot status`` beside a running daemon."""
        if not await asyncio.to_thread(path.is_file):
            raise FileNotFoundError(f"no state database at {path}")
        uri = (await asyncio.to_thread(path.resolve)).as_uri()
        connection = await aiosqlite.connect(f"{uri}?mode=ro", uri=True, isolation_level=None)
        connection.row_factory = aiosqlite.Row
        try:
            await connection.execute("PRAGMA busy_timeout=5000")
        except BaseException:
            await connection.close()
            raise
        return cls(connection)

    async def close(self) -> None:
        await self.connection.close()

    async def fetch_one(self, sql: str, params: Params) -> Row | None:
        return await self._statements.fetch_one(sql, params)

    async def fetch_all(self, sql: str, params: Params) -> list[Row]:
        return await self._statements.fetch_all(sql, params)

    async def write(self, sql: str, params: Params, durable: bool = True) -> int:
        if durable:
            return await self._execute_when_free(sql, params)
        await self.connection.execute("PRAGMA synchronous=NORMAL")
        try:
            return await self._execute_when_free(sql, params)
        finally:
            await self.connection.execute("PRAGMA synchronous=FULL")

    async def _execute_when_free(self, sql: str, params: Params) -> int:
        """A write that may meet another process's (a second replica on this file, issue
        18). SQLite waits ``busy_timeout`` for a lock, but not when this connection has a
        read open from an older snapshot (a coroutine's SELECT between its steps, which
        aiosqlite interleaves with our write): that is SQLITE_BUSY at once. Nothing was
        written then, so the write is tried again once the read has moved on."""
        for attempt in range(_BUSY_ATTEMPTS):
            try:
                return await self._statements.execute(sql, params)
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == _BUSY_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(min(0.5, 0.005 * 2**attempt))
        raise AssertionError("unreachable")

    @asynccontextmanager
    async def transaction(self, durable: bool = True) -> AsyncIterator[SqliteTransaction]:
        """BEGIN IMMEDIATE: the write lock is taken at the start, so a read inside the
        transaction is never stale by the time the transaction writes. ``durable=False``:
        ``synchronous=NORMAL`` for this commit only (no fsync; the next one covers it)."""
        if not durable:
            await self.connection.execute("PRAGMA synchronous=NORMAL")
        try:
            await self._execute_when_free("BEGIN IMMEDIATE", ())
            try:
                yield self._statements
            except BaseException:
                await self.connection.execute("ROLLBACK")
                raise
            await self.connection.execute("COMMIT")
        finally:
            if not durable:
                await self.connection.execute("PRAGMA synchronous=FULL")

    async def has_table(self, name: str) -> bool:
        row = await self.fetch_one(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
        )
        return row is not None

    async def table_names(self) -> list[str]:
        rows = await self.fetch_all(
            "SELECT name FROM sqlite_master WHERE type = 'table'"
            " AND name NOT LIKE 'sqlite_%' ORDER BY name",
            (),
        )
        return [str(row[0]) for row in rows]

    async def table_columns(self, name: str) -> list[str]:
        rows = await self.fetch_all("SELECT name FROM pragma_table_info(?)", (name,))
        return [str(row[0]) for row in rows]

    async def ensure_versions_table(self, ddl: str) -> None:
        await self.write(ddl, ())

    def migration_text(self, migration: Migration) -> str:
        return migration.sqlite if isinstance(migration, Dialects) else migration

    async def apply_migration(self, owner: str, number: int, migration: Migration) -> bool:
        # executescript commits an open transaction before it runs, so BEGIN goes inside the
        # script; the owner name is checked by Database, the version is an int.
        record = (
            f"INSERT INTO schema_versions (owner, version) VALUES ('{owner}', {int(number)})"
            " ON CONFLICT (owner) DO UPDATE SET version = excluded.version;"
        )
        script = self.migration_text(migration)
        try:
            await self.connection.executescript(f"BEGIN IMMEDIATE;\n{script}\n;\n{record}\nCOMMIT;")
        except BaseException:
            if self.connection.in_transaction:
                await self.connection.execute("ROLLBACK")
            raise
        return True

    async def legacy_user_version(self) -> int:
        """The core's version as kept before per-owner versions (``PRAGMA user_version``)."""
        row = await self.fetch_one("PRAGMA user_version", ())
        return int(row[0]) if row else 0
