"""One database for every owner of state (the core, each channel), on SQLite or PostgreSQL.

``open`` picks the engine: a path is a SQLite file (``sqlite_backend``: one connection, one
writer), a ``postgresql://`` URL a pooled PostgreSQL server (``postgres_backend``). Stores
write portable SQL (``?`` placeholders, ON CONFLICT, RETURNING, ``rowid`` for insertion
order; AGENTS.md) and use only this class's methods, never an engine's connection.

On SQLite all coroutines share one connection. Without a lock, a coroutine's
single-statement write could land inside another coroutine's open ``BEGIN IMMEDIATE`` (and
vanish with its ROLLBACK), and two transactions could try to begin at once ("cannot start
a transaction within a transaction"). Every write goes through ``write``, ``write_many``,
``write_batch`` or ``transaction``, which take the same lock. Reads need no lock. On
PostgreSQL single statements run on their own pooled connections; transactions still take
the lock, so one process behaves the same on both engines.

Owners share the database, not their schemas: each owner ("core", "matrix", "slack", ...)
has its own append-only migrations (a text in SQLite's dialect, translated for PostgreSQL,
or ``Dialects`` with both), applied by ``migrate`` and counted in ``schema_versions``, and
its own tables (a channel's are prefixed with its name).

Retention: an owner registers a pruner (``add_pruner``); the daemon calls ``prune`` at start
and daily, and each owner deletes what it keeps only for a while.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from pathlib import Path
from typing import Any

import aiosqlite

from gateway_bot.state.backend import (
    Backend,
    Dialects,
    Migration,
    Params,
    Row,
    StateUnavailable,
    Transaction,
    is_postgres_url,
)
from gateway_bot.state.sqlite_backend import SqliteBackend

__all__ = [
    "Database",
    "Dialects",
    "Migration",
    "Params",
    "Row",
    "SchemaTooNew",
    "StateTarget",
    "StateUnavailable",
    "Transaction",
]

log = logging.getLogger(__name__)

Pruner = Callable[[float], Awaitable[int]]
"""Deletes (or empties) what its owner keeps only until the given time (epoch seconds);
returns how many rows it touched. Must be safe to run at any moment, repeatedly."""


_OWNER = re.compile(r"[a-z][a-z0-9_]{0,31}")

_VERSIONS_TABLE = """
    CREATE TABLE IF NOT EXISTS schema_versions (
        owner TEXT PRIMARY KEY,
        version INTEGER NOT NULL
    )
"""

StateTarget = Path | str
"""Where the state lives: a SQLite file's path, or a ``postgresql://`` URL."""


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer gateway-bot than this one."""


class Database:
    def __init__(self, *, pool_size: int = 10) -> None:
        """``pool_size``: most PostgreSQL connections this process holds."""
        self._backend: Backend | None = None
        self._lock = asyncio.Lock()
        self._migrating = asyncio.Lock()
        self._pruners: dict[str, Pruner] = {}
        self._pool_size = pool_size

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            raise RuntimeError("store is not open")
        return self._backend

    @property
    def dialect(self) -> str:
        """ "sqlite" or "postgresql"."""
        return self.backend.dialect

    @property
    def skip_locked(self) -> str:
        """What a claiming ``SELECT ... `` ends with: `` FOR UPDATE SKIP LOCKED`` on
        PostgreSQL; nothing on SQLite, where ``transaction`` already excludes every other
        writer (BEGIN IMMEDIATE)."""
        return " FOR UPDATE SKIP LOCKED" if self.dialect == "postgresql" else ""

    @property
    def connection(self) -> aiosqlite.Connection:
        """The SQLite connection (SQLite-only tools and tests; stores never use it)."""
        backend = self.backend
        if not isinstance(backend, SqliteBackend):
            raise RuntimeError("the state database is not SQLite")
        return backend.connection

    @property
    def flushes(self) -> int:
        """Disk flushes made since the database was opened (group commit: one serves
        every durable commit waiting at the time; the benchmarks count them)."""
        return self.backend.flusher.flushes

    async def open(self, target: StateTarget) -> None:
        """Open a SQLite file (a path) or a PostgreSQL database (a URL)."""
        if is_postgres_url(target):
            from gateway_bot.state.postgres_backend import PostgresBackend  # psycopg: ~0.2 s

            self._backend = await PostgresBackend.open(str(target), pool_size=self._pool_size)
        else:
            self._backend = await SqliteBackend.open(Path(target))

    async def open_read_only(self, target: StateTarget) -> None:
        """For reading beside a running daemon: a SQLite file opened read-only (no pragma
        that writes); a PostgreSQL database as usual (its server keeps readers apart)."""
        if is_postgres_url(target):
            await self.open(target)
        else:
            self._backend = await SqliteBackend.open_read_only(Path(target))

    async def close(self) -> None:
        backend, self._backend = self._backend, None
        if backend is not None:
            await backend.close()

    # -- reads and writes ------------------------------------------------------------------

    async def fetch_one(self, sql: str, params: Params = ()) -> Row | None:
        return await self.backend.fetch_one(sql, tuple(params))

    async def fetch_all(self, sql: str, params: Params = ()) -> list[Row]:
        return await self.backend.fetch_all(sql, tuple(params))

    async def write(self, sql: str, params: Params = (), *, durable: bool = True) -> int:
        """One statement in its own (auto-committed) transaction; returns the row count.

        A durable commit returns once it is on disk; concurrent ones share one flush
        (group commit, ``group_flush``), waited for after the write lock is released.
        ``durable=False`` returns once committed, without waiting for the disk: safe from
        a crash of the process (kill -9) at once, from a power cut once the next flush is
        done (anyone's, or a background one ``group_flush.RELAXED_FLUSH_S`` later). For a
        row that recovery rebuilds anyway, or one written after the effect it records;
        it saves a disk flush (ms) on a hot path."""
        backend = self.backend
        guard: AbstractAsyncContextManager[Any] = (
            self._lock if backend.needs_write_lock else nullcontext()
        )
        async with guard:
            count = await backend.write(sql, tuple(params), durable)
            commit = backend.flusher.committed()
        await self._flushed(commit, durable)  # outside the lock: writers share the flush
        return count

    async def write_many(self, sql: str, rows: Iterable[Params]) -> None:
        """One statement for each row, all in one transaction."""
        await self.write_batch([(sql, row) for row in rows])

    async def write_batch(
        self, statements: Sequence[tuple[str, Params]], *, durable: bool = True
    ) -> None:
        """Several statements that commit together or not at all; ``durable`` as for
        ``write``."""
        await self.batch(statements, durable=durable)

    async def batch(
        self,
        writes: Sequence[tuple[str, Params]],
        read: tuple[str, Params] | None = None,
        *,
        durable: bool = True,
    ) -> list[Row]:
        """``write_batch`` in one trip to the engine where it can (``Backend.batch``), then
        ``read`` in the same transaction (what the writes wrote, or found): its rows."""
        backend = self.backend
        async with self._lock:
            rows = await backend.batch(writes, read)
            commit = backend.flusher.committed()
        await self._flushed(commit, durable)  # outside the lock: writers share the flush
        return rows

    async def batch_flushed(
        self, writes: Sequence[tuple[str, Params]], read: tuple[str, Params] | None = None
    ) -> tuple[list[Row], asyncio.Future[None]]:
        """``batch``, returning once committed, with a future (the caller's own) that
        resolves once the commit is on disk, its flush begun before this returns: for a
        store that starts work between a commit and its flush (``SqlStore.accept_inbound``),
        so the disk is at it meanwhile. SQLite syncs in the same trip to its thread."""
        backend = self.backend
        async with self._lock:
            rows, synced = await backend.batch_synced(writes, read)
            commit = backend.flusher.committed()
        if synced is None:
            return rows, backend.flusher.begun(commit)
        return rows, backend.flusher.made(commit, synced)

    @asynccontextmanager
    async def transaction(self, *, durable: bool = True) -> AsyncIterator[Transaction]:
        """Several statements that commit together or not at all (rolled back when the
        block raises). SQLite: BEGIN IMMEDIATE; PostgreSQL: BEGIN (READ COMMITTED), where
        rows a decision depends on are read ``FOR UPDATE`` (see ``skip_locked``).
        ``durable`` as for ``write``."""
        backend = self.backend
        async with self._lock:
            async with backend.transaction(durable) as transaction:
                yield transaction
            commit = backend.flusher.committed()
        await self._flushed(commit, durable)  # outside the lock: writers share the flush

    async def flush(self) -> None:
        """Return once every commit made so far is on disk."""
        await self.backend.flusher.wait()

    async def _flushed(self, commit: int, durable: bool) -> None:
        """After commit number ``commit``: durable, wait until it is on disk (group
        commit); else only make sure a flush follows soon."""
        if durable:
            await self.backend.flusher.wait(commit)
        else:
            self.backend.flusher.soon()

    # -- schema ----------------------------------------------------------------------------

    async def schema_version(self, owner: str) -> int | None:
        """The owner's migrated version, or None when it never migrated here."""
        _check_owner(owner)
        if not await self.backend.has_table("schema_versions"):
            return None  # reads only, so a read-only connection can ask too
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
        await self._ensure_versions_table()
        await self.write(
            "INSERT INTO schema_versions (owner, version) VALUES (?, ?)"
            " ON CONFLICT (owner) DO NOTHING",
            (owner, int(version)),
        )

    async def migrate(self, owner: str, migrations: Sequence[Migration]) -> list[int]:
        """Apply ``owner``'s pending migrations in order, each in its own transaction with
        the new version number, so a crash leaves the schema at a version, never between.
        Returns the version numbers applied.

        ``migrations`` is append-only: entry N (from 1) moves the owner from version N-1 to
        N. A database at a higher version than the list knows is refused (SchemaTooNew):
        an older gateway-bot must not write into a schema it does not understand.
        """
        _check_owner(owner)
        await self._ensure_versions_table()
        applied: list[int] = []
        async with self._migrating:  # two callers for one owner must not both apply N
            await self.check_not_newer(owner, len(migrations))
            current = await self.schema_version(owner) or 0
            for number, migration in enumerate(migrations[current:], start=current + 1):
                async with self._lock:
                    if await self.backend.apply_migration(owner, number, migration):
                        applied.append(number)
                        log.info("state: migrated %s to schema version %d", owner, number)
                    commit = self.backend.flusher.committed()
                await self._flushed(commit, True)
        return applied

    async def _ensure_versions_table(self) -> None:
        async with self._lock:
            await self.backend.ensure_versions_table(_VERSIONS_TABLE)
            commit = self.backend.flusher.committed()
        await self._flushed(commit, True)

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
