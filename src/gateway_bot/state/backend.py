"""What a state database engine provides to ``Database`` (``state/database.py``).

Two engines implement it: SQLite (``sqlite_backend``, one file, the embedded default) and
PostgreSQL (``postgres_backend``, a pooled server connection). Stores never see an engine:
they call ``Database``'s methods with portable SQL (``?`` placeholders, ``ON CONFLICT``,
``rowid`` for insertion order, ``RETURNING``), and the engine does the rest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from gateway_bot.state.group_flush import GroupFlush

Params = Iterable[Any]


class StateUnavailable(RuntimeError):
    """The state database cannot be reached or opened (the message says why, and never
    carries a password)."""


class Row(Protocol):
    """A result row: indexable by position and by column name, iterable, sized (sqlite3's
    Row and the PostgreSQL engine's row both are)."""

    def __getitem__(self, key: Any, /) -> Any: ...

    def __iter__(self) -> Iterator[Any]: ...

    def __len__(self) -> int: ...

    def keys(self) -> list[str]: ...


class Transaction(Protocol):
    """Statements inside one open transaction (``Database.transaction``)."""

    async def fetch_one(self, sql: str, params: Params = ()) -> Row | None: ...

    async def fetch_all(self, sql: str, params: Params = ()) -> list[Row]: ...

    async def execute(self, sql: str, params: Params = ()) -> int:
        """Run one statement; returns the row count."""
        ...


@dataclass(frozen=True)
class Dialects:
    """One migration written twice, where the two engines' DDL differ beyond what the
    PostgreSQL engine translates (``postgres_ddl``). The PostgreSQL text is used as it is."""

    sqlite: str
    postgresql: str


Migration = str | Dialects
"""A migration: portable text (SQLite's dialect, translated for PostgreSQL) or both texts."""


class Backend(Protocol):
    dialect: str
    """"sqlite" or "postgresql"."""

    async def close(self) -> None: ...

    async def fetch_one(self, sql: str, params: Params) -> Row | None: ...

    async def fetch_all(self, sql: str, params: Params) -> list[Row]: ...

    async def write(self, sql: str, params: Params, durable: bool = True) -> int:
        """One auto-committed statement; the caller holds the write lock where the engine
        needs one (``needs_write_lock``). ``durable=False``: committed without waiting for
        the disk (see ``Database.write``)."""
        ...

    flusher: GroupFlush
    """Puts commits on disk, one flush for every commit made before it (``group_flush``):
    ``write``, ``transaction`` and migrations commit without waiting for the disk, and
    ``Database`` waits here (outside its lock) for the durable ones."""

    needs_write_lock: bool
    """True when single statements must wait for an open transaction (one connection)."""

    def transaction(self, durable: bool = True) -> AbstractAsyncContextManager[Transaction]: ...

    async def batch(
        self, writes: Sequence[tuple[str, Params]], read: tuple[str, Params] | None = None
    ) -> list[Row]:
        """``writes`` that commit together or not at all, then ``read`` (what they wrote, or
        found) in the same transaction, in one trip to the engine where it can (SQLite: one
        call on its thread, BEGIN IMMEDIATE to COMMIT); its rows, or none. The caller holds
        the write lock."""
        ...

    async def batch_synced(
        self, writes: Sequence[tuple[str, Params]], read: tuple[str, Params] | None = None
    ) -> tuple[list[Row], asyncio.Future[None] | None]:
        """``batch``, returning once committed, with the future of a flush the engine
        began right after the commit (SQLite: the fsync on its thread, in the same trip),
        or None where ``flusher`` is to flush it (PostgreSQL)."""
        ...

    async def has_table(self, name: str) -> bool: ...

    async def ensure_versions_table(self, ddl: str) -> None: ...

    async def apply_migration(self, owner: str, number: int, migration: Migration) -> bool:
        """Apply one migration and record ``number`` for ``owner`` in one transaction,
        unless the owner is already at or past it (another process got there); True when
        applied."""
        ...

    def migration_text(self, migration: Migration) -> str:
        """The text this engine runs for ``migration``."""
        ...

    async def legacy_user_version(self) -> int:
        """The core's version as SQLite kept it before per-owner versions (0 elsewhere)."""
        ...

    async def table_columns(self, name: str) -> list[str]:
        """A table's columns in order ([] when there is no such table)."""
        ...

    async def table_names(self) -> list[str]:
        """Every table of the database (for ``state copy``)."""
        ...


SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(target: object) -> bool:
    """A ``postgresql://`` URL (the PostgreSQL engine) rather than a SQLite path."""
    return isinstance(target, str) and target.startswith(SCHEMES)
