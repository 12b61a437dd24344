"""One SQLite connection shared by the store's parts, with writes serialised.

All coroutines share one aiosqlite connection (one writer). Without a lock, a coroutine's
single-statement write could land inside another coroutine's open ``BEGIN IMMEDIATE`` (and
vanish with its ROLLBACK), and two transactions could try to begin at once ("cannot start
a transaction within a transaction"). Every write goes through ``write`` or
``transaction``, which take the same lock. Reads need no lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import aiosqlite

Params = Iterable[Any]


class Database:
    def __init__(self) -> None:
        self._connection: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()

    @property
    def connection(self) -> aiosqlite.Connection:
        if self._connection is None:
            raise RuntimeError("store is not open")
        return self._connection

    def attach(self, connection: aiosqlite.Connection | None) -> None:
        self._connection = connection

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
            cursor = await self.connection.execute(sql, tuple(params))
            return cursor.rowcount

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """Several statements that commit together or not at all."""
        async with self._lock:
            await self.connection.execute("BEGIN IMMEDIATE")
            try:
                yield self.connection
            except BaseException:
                await self.connection.execute("ROLLBACK")
                raise
            await self.connection.execute("COMMIT")
