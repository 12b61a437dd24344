"""The PostgreSQL engine: psycopg 3 (async) with a connection pool.

Each read and single write borrows a pooled connection in autocommit mode; a transaction
holds one connection from BEGIN to COMMIT. Placeholders and SQLite-dialect migrations are
translated by ``postgres_sql``. Migrations take a transaction-scoped advisory lock, so
several daemons starting on one database apply each migration once.

Group commit (decision 0098), as on SQLite: every connection commits with
``synchronous_commit`` off (committed and visible at once, not yet flushed), and
``Database`` makes a durable commit wait for one synchronous commit made after it, shared by
every writer waiting meanwhile. PostgreSQL's WAL is flushed in order, so that one flush
puts every earlier commit (any connection's) on disk. Transactions, serialised by
``Database``'s lock, no longer hold it during their flush.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg import AsyncConnection, AsyncCursor
from psycopg.rows import RowMaker
from psycopg_pool import AsyncConnectionPool

from gateway_bot.state.backend import Dialects, Migration, Params, Row, StateUnavailable
from gateway_bot.state.group_flush import GroupFlush
from gateway_bot.state.postgres_sql import placeholders, postgres_ddl

MIGRATION_LOCK = 0x67776264  # "gwbd": pg_advisory_xact_lock's key for schema changes


class PgRow(tuple[Any, ...]):
    """A row indexable by position (a tuple) and by column name, like sqlite3's Row."""

    _index: dict[str, int]

    def __new__(cls, values: Sequence[Any], index: dict[str, int]) -> PgRow:
        row = super().__new__(cls, values)
        row._index = index
        return row

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._index)


def _rows(cursor: AsyncCursor[Any]) -> RowMaker[PgRow]:
    names = [column.name for column in cursor.description or ()]
    index = {name: number for number, name in enumerate(names)}

    def make(values: Sequence[Any]) -> PgRow:
        return PgRow(values, index)

    return make


def _params(params: Params) -> tuple[Any, ...]:
    """Booleans as 0/1: the schema keeps flags in integer columns (as SQLite does). A NUL
    in text becomes U+FFFD: PostgreSQL refuses NUL in TEXT, and a stranger's name or message
    (an approval card's preview) must not be able to make a store call fail."""
    return tuple(_param(p) for p in params)


def _param(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and "\x00" in value:
        return value.replace("\x00", "\ufffd")
    return value


class PostgresTransaction:
    def __init__(self, connection: AsyncConnection[Any]) -> None:
        self._connection = connection

    async def fetch_one(self, sql: str, params: Params = ()) -> Row | None:
        cursor = await self._connection.execute(placeholders(sql), _params(params))
        row: PgRow | None = await cursor.fetchone()
        return row

    async def fetch_all(self, sql: str, params: Params = ()) -> list[Row]:
        cursor = await self._connection.execute(placeholders(sql), _params(params))
        return list(await cursor.fetchall())

    async def execute(self, sql: str, params: Params = ()) -> int:
        cursor = await self._connection.execute(placeholders(sql), _params(params))
        return cursor.rowcount


async def _commit_without_flush(connection: AsyncConnection[Any]) -> None:
    """Each pooled connection's session: commits do not wait for the WAL flush (the
    group flush does; the URL's own ``options`` are left as they are)."""
    await connection.execute("SET synchronous_commit = off")


class PostgresBackend:
    dialect = "postgresql"
    needs_write_lock = False

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self._pool = pool
        self.flusher = GroupFlush(self._flush)

    async def _flush(self) -> None:
        """One synchronous commit with a transaction id (so it has a commit record to
        flush): it returns once the WAL up to it, every earlier commit's, is on disk."""
        async with self._pool.connection() as connection:
            await connection.execute(
                "SELECT set_config('synchronous_commit', 'on', true), pg_current_xact_id()"
            )

    @classmethod
    async def open(cls, url: str, *, pool_size: int = 10) -> PostgresBackend:
        """One connection first, so a wrong host or password is told at once and plainly
        (the pool would retry for its whole timeout and say only that it timed out)."""
        try:
            probe = await AsyncConnection.connect(url, connect_timeout=10)
        except psycopg.Error as exc:
            raise StateUnavailable(f"cannot open the PostgreSQL state database: {exc}") from None
        await probe.close()
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            url,
            min_size=1,
            max_size=max(1, pool_size),
            kwargs={"autocommit": True, "row_factory": _rows},
            configure=_commit_without_flush,
            open=False,
        )
        await pool.open(wait=True, timeout=30)
        return cls(pool)

    async def close(self) -> None:
        try:
            await self.flusher.close()
        finally:
            await self._pool.close()

    async def fetch_one(self, sql: str, params: Params) -> Row | None:
        async with self._pool.connection() as connection:
            return await PostgresTransaction(connection).fetch_one(sql, params)

    async def fetch_all(self, sql: str, params: Params) -> list[Row]:
        async with self._pool.connection() as connection:
            return await PostgresTransaction(connection).fetch_all(sql, params)

    async def write(self, sql: str, params: Params, durable: bool = True) -> int:
        """Committed, not yet flushed: ``Database`` then waits for ``flusher``, or not."""
        async with self._pool.connection() as connection:
            return await PostgresTransaction(connection).execute(sql, params)

    @asynccontextmanager
    async def transaction(self, durable: bool = True) -> AsyncIterator[PostgresTransaction]:
        """BEGIN ... COMMIT (READ COMMITTED) on one pooled connection; rolled back when the
        block raises. Rows a decision depends on are locked with ``FOR UPDATE``.
        Committed, not yet flushed: ``Database`` then waits for ``flusher``, or not."""
        async with self._pool.connection() as connection, connection.transaction():
            yield PostgresTransaction(connection)

    async def batch(
        self, writes: Sequence[tuple[str, Params]], read: tuple[str, Params] | None = None
    ) -> list[Row]:
        async with self.transaction() as transaction:
            for sql, params in writes:
                await transaction.execute(sql, params)
            return [] if read is None else await transaction.fetch_all(*read)

    async def batch_synced(
        self, writes: Sequence[tuple[str, Params]], read: tuple[str, Params] | None = None
    ) -> tuple[list[Row], asyncio.Future[None] | None]:
        """The group flush's synchronous commit makes it durable (``Database``)."""
        return await self.batch(writes, read), None

    async def has_table(self, name: str) -> bool:
        row = await self.fetch_one(
            "SELECT 1 FROM information_schema.tables"
            " WHERE table_schema = current_schema() AND table_name = ?",
            (name,),
        )
        return row is not None

    async def table_names(self) -> list[str]:
        rows = await self.fetch_all(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
            " ORDER BY table_name",
            (),
        )
        return [str(row[0]) for row in rows]

    async def table_columns(self, name: str) -> list[str]:
        rows = await self.fetch_all(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = ? ORDER BY ordinal_position",
            (name,),
        )
        return [str(row[0]) for row in rows]

    async def ensure_versions_table(self, ddl: str) -> None:
        async with self._pool.connection() as connection, connection.transaction():
            await connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            await connection.execute(ddl)

    def migration_text(self, migration: Migration) -> str:
        if isinstance(migration, Dialects):
            return migration.postgresql
        return postgres_ddl(migration)

    async def apply_migration(self, owner: str, number: int, migration: Migration) -> bool:
        script = self.migration_text(migration)
        async with self._pool.connection() as connection, connection.transaction():
            await connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            cursor = await connection.execute(
                "SELECT version FROM schema_versions WHERE owner = %s", (owner,)
            )
            row = await cursor.fetchone()
            if row is not None and int(row[0]) >= number:
                return False
            await connection.execute(script.encode())  # no parameters: several statements
            await connection.execute(
                "INSERT INTO schema_versions (owner, version) VALUES (%s, %s)"
                " ON CONFLICT (owner) DO UPDATE SET version = excluded.version",
                (owner, number),
            )
        return True

    async def legacy_user_version(self) -> int:
        return 0
