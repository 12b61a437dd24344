"""The SQLite engine: one aiosqlite connection (one writer), WAL, group commit.

aiosqlite runs the blocking sqlite3 calls on its own thread, so the event loop never waits
on disk. All coroutines share the connection, so ``Database`` serialises writes and
transactions with one lock (``needs_write_lock``).

Durability (decision 0098): the connection commits with ``synchronous=NORMAL``: a commit is
written to the WAL file (the OS has it: it survives the process's death, kill -9) but not
fsynced. ``Database`` then has ``flusher`` fsync the WAL file itself, once for every
commit made before the fsync started (``group_flush``): a durable commit returns only once
it is on disk, as with ``synchronous=FULL``, but concurrent writers share the fsync and
none of them holds the write lock while it runs. Checkpoints still sync (NORMAL syncs the
WAL before and the database file after each one), so a WAL restarted after a checkpoint
loses nothing; they run on a connection of their own (``wal_checkpoints``), not inside a
commit on this one.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

import aiosqlite

from gateway_bot.state import wal_sync
from gateway_bot.state.backend import Dialects, Migration, Params, Row
from gateway_bot.state.group_flush import GroupFlush
from gateway_bot.state.wal_checkpoints import BACKSTOP_PAGES, WalCheckpoints

_T = TypeVar("_T")
_BUSY_ATTEMPTS = 25
"""About 10 s of retries (backing off to 0.5 s) before "database is locked" is raised."""


class SqliteTransaction:
    """Each statement is one trip to aiosqlite's thread (statement, rows and cursor
    together): aiosqlite's cursor API makes three (execute, fetch, close), and a task's
    way through the core runs a few dozen statements (decision 0085)."""

    def __init__(self, connection: aiosqlite.Connection) -> None:
        self._connection = connection
        # aiosqlite's own queue to its thread (untyped): runs a function there, in order
        # with everything else on the connection.
        self._on_thread = cast(Callable[..., Awaitable[Any]], connection._execute)

    async def fetch_one(self, sql: str, params: Params = ()) -> Row | None:
        row: Row | None = await self._on_thread(_fetch_one, self._connection, sql, tuple(params))
        return row

    async def fetch_all(self, sql: str, params: Params = ()) -> list[Row]:
        rows: list[Row] = await self._on_thread(_fetch_all, self._connection, sql, tuple(params))
        return rows

    async def execute(self, sql: str, params: Params = ()) -> int:
        count: int = await self._on_thread(_execute, self._connection, sql, tuple(params))
        return count


class _OpeningTransaction(SqliteTransaction):
    """A transaction whose ``BEGIN IMMEDIATE`` goes to the thread with its first statement:
    one trip fewer per transaction (issue 33: the message's own commit before its
    acknowledgement was four trips, BEGIN, two INSERTs and COMMIT). ``SQLITE_BUSY`` on
    that BEGIN wrote nothing: it is tried again, as a BEGIN of its own was."""

    def __init__(self, connection: aiosqlite.Connection) -> None:
        super().__init__(connection)
        self.begun = False

    async def fetch_one(self, sql: str, params: Params = ()) -> Row | None:
        row: Row | None = await self._first(_fetch_one, sql, params)
        return row

    async def fetch_all(self, sql: str, params: Params = ()) -> list[Row]:
        rows: list[Row] = await self._first(_fetch_all, sql, params)
        return rows

    async def execute(self, sql: str, params: Params = ()) -> int:
        count: int = await self._first(_execute, sql, params)
        return count

    async def begin(self) -> None:
        """BEGIN now (a block that ends without a statement commits nothing otherwise)."""
        await self._first(None, "", ())

    async def _first(self, statement: Any, sql: str, params: Params) -> Any:
        if self.begun:
            return await self._on_thread(statement, self._connection, sql, tuple(params))
        try:
            result = await _until_begun(
                lambda: self._on_thread(
                    _begin_then, self._connection, statement, sql, tuple(params)
                )
            )
        except BaseException:
            self.begun = self._connection.in_transaction
            raise
        self.begun = True
        return result


class _NotBegun(Exception):
    """BEGIN IMMEDIATE failed: nothing was written."""


async def _until_begun(trip: Callable[[], Awaitable[_T]]) -> _T:
    """``trip`` (a call that starts with BEGIN IMMEDIATE) made again while another process
    holds the write lock (``_NotBegun``: nothing was written), about 10 s in all, backing
    off to 0.5 s; then, or for any other refusal, the engine's error."""
    for attempt in range(_BUSY_ATTEMPTS):
        try:
            return await trip()
        except _NotBegun as exc:
            if "locked" not in str(exc) or attempt == _BUSY_ATTEMPTS - 1:
                raise exc.__cause__ or exc from None
            await asyncio.sleep(min(0.5, 0.005 * 2**attempt))
    raise AssertionError("unreachable")


def _begin_then(
    connection: aiosqlite.Connection, statement: Any, sql: str, params: tuple[Any, ...]
) -> Any:
    try:
        connection._conn.execute("BEGIN IMMEDIATE").close()
    except sqlite3.OperationalError as exc:
        raise _NotBegun(str(exc)) from exc
    return None if statement is None else statement(connection, sql, params)


def _run_batch(
    connection: aiosqlite.Connection,
    statements: Sequence[tuple[str, tuple[Any, ...]]],
    reads_last: bool,
) -> list[Any]:
    """On aiosqlite's thread: BEGIN IMMEDIATE, each statement, COMMIT; ROLLBACK on any error
    (nothing was written then). The last statement's rows when it is a read."""
    _begin_then(connection, None, "", ())
    rows: list[Any] = []
    try:
        for n, (sql, params) in enumerate(statements):
            if reads_last and n == len(statements) - 1:
                rows = _fetch_all(connection, sql, params)
            else:
                _execute(connection, sql, params)
        connection._conn.execute("COMMIT").close()
    except BaseException:
        if connection._conn.in_transaction:
            connection._conn.execute("ROLLBACK").close()
        raise
    return rows


def _fetch_one(connection: aiosqlite.Connection, sql: str, params: tuple[Any, ...]) -> Any:
    cursor = connection._conn.execute(sql, params)
    try:
        return cursor.fetchone()
    finally:
        cursor.close()


def _fetch_all(connection: aiosqlite.Connection, sql: str, params: tuple[Any, ...]) -> Any:
    cursor = connection._conn.execute(sql, params)
    try:
        return cursor.fetchall()
    finally:
        cursor.close()


def _execute(connection: aiosqlite.Connection, sql: str, params: tuple[Any, ...]) -> int:
    cursor = connection._conn.execute(sql, params)
    try:
        return cursor.rowcount
    finally:
        cursor.close()


class SqliteBackend:
    dialect = "sqlite"
    needs_write_lock = True

    def __init__(
        self, connection: aiosqlite.Connection, path: Path, *, checkpoints: bool = True
    ) -> None:
        """``checkpoints``: WAL checkpoints beside the work (``wal_checkpoints``); False
        for a read-only connection."""
        self.connection = connection
        self._statements = SqliteTransaction(connection)
        self._wal = Path(f"{path}-wal")
        self._checkpoints = WalCheckpoints(path) if checkpoints else None
        self.flusher = GroupFlush(self._flush)

    def _flush(self) -> asyncio.Future[None]:
        """run_in_executor hands the fsync to its thread at the call (to_thread would at
        the coroutine's first step, a turn of the loop later)."""
        flushing = asyncio.get_running_loop().run_in_executor(None, wal_sync.fsync_file, self._wal)
        flushing.add_done_callback(self._flushed)
        return flushing

    def _flushed(self, done: asyncio.Future[None]) -> None:
        if not done.cancelled():
            done.exception()  # (raised to whoever waits for the flush: retrieved here)
        if self._checkpoints is not None:
            self._checkpoints.flushed(self.flusher.commits)

    @classmethod
    async def open(cls, path: Path) -> SqliteBackend:
        """WAL (readers never wait for the writer), NORMAL sync with our own group flush
        ("durable" still means "on disk": see the module), foreign keys on, and a busy
        timeout for a second process (``gateway-bot status``, a replica)."""
        await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
        connection = await aiosqlite.connect(path, isolation_level=None)
        connection.row_factory = aiosqlite.Row
        try:
            await connection.execute("PRAGMA journal_mode=WAL")
            await connection.execute("PRAGMA synchronous=NORMAL")
            await connection.execute("PRAGMA foreign_keys=ON")
            await connection.execute("PRAGMA busy_timeout=5000")
            await connection.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_PAGES}")
        except BaseException:
            await connection.close()
            raise
        return cls(connection, path)

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
        return cls(connection, path, checkpoints=False)

    async def close(self) -> None:
        try:
            await self.flusher.close()
            if self._checkpoints is not None:
                await self._checkpoints.close()
        finally:
            await self.connection.close()

    async def fetch_one(self, sql: str, params: Params) -> Row | None:
        return await self._statements.fetch_one(sql, params)

    async def fetch_all(self, sql: str, params: Params) -> list[Row]:
        return await self._statements.fetch_all(sql, params)

    async def write(self, sql: str, params: Params, durable: bool = True) -> int:
        """Committed, not yet flushed: ``Database`` then waits for ``flusher``, or not."""
        return await self._execute_when_free(sql, params)

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
        transaction is never stale by the time the transaction writes. Committed, not yet
        flushed: ``Database`` then waits for ``flusher``, or not."""
        transaction = _OpeningTransaction(self.connection)
        try:
            yield transaction
        except BaseException:
            if transaction.begun:
                await self._statements.execute("ROLLBACK")
            raise
        if not transaction.begun:
            await transaction.begin()  # (a block with no statement still takes the lock)
        await self._statements.execute("COMMIT")

    async def batch(
        self, writes: Sequence[tuple[str, Params]], read: tuple[str, Params] | None = None
    ) -> list[Row]:
        """One trip: the message's commit before its acknowledgement was three (issue 33)."""
        plain = [(sql, tuple(params)) for sql, params in writes]
        if read is not None:
            plain.append((read[0], tuple(read[1])))
        on_thread = cast(Callable[..., Awaitable[list[Row]]], self.connection._execute)
        return await _until_begun(
            lambda: on_thread(_run_batch, self.connection, plain, read is not None)
        )

    async def batch_synced(
        self, writes: Sequence[tuple[str, Params]], read: tuple[str, Params] | None = None
    ) -> tuple[list[Row], asyncio.Future[None] | None]:
        """``batch`` and its fsync in one trip to the connection's thread: the rows come
        back as soon as the COMMIT is made, and the thread goes on to the fsync at once.
        A thread of the executor took ~0.3 ms to wake for it (and its start wandered by
        ms under load) on the way to a message's acknowledgement (issue 33); statements
        queued meanwhile wait for the fsync, as they would for a commit."""
        plain = [(sql, tuple(params)) for sql, params in writes]
        if read is not None:
            plain.append((read[0], tuple(read[1])))
        on_thread = cast(Callable[..., Awaitable[None]], self.connection._execute)
        run = functools.partial(_run_batch, self.connection, plain, read is not None)

        async def trip() -> tuple[list[Row], asyncio.Future[None] | None]:
            committed: asyncio.Future[list[Row]] = asyncio.get_running_loop().create_future()
            synced = asyncio.ensure_future(
                on_thread(wal_sync.batch_then_sync, run, committed, self._wal)
            )
            synced.add_done_callback(self._flushed)
            return await wal_sync.committed_or_failed(committed, synced), synced

        return await _until_begun(trip)

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
