"""``gateway-bot state copy``: move a deployment's SQLite state into another database
(PostgreSQL, when a deployment outgrows one host), verified table by table.

The source is read in one read transaction (a consistent snapshot even beside a running
daemon, though the daemon should be stopped: what it writes afterwards is not copied).
The target is first migrated to exactly the source's version of each owner, then every
table's rows, with SQLite's ``rowid`` (insertion order, which the stores sort by), are
inserted parents first (foreign keys) inside ONE transaction, and the row counts are
compared before it commits: a copy is whole or absent. A target that already holds rows
is refused unless ``replace`` (then those tables are emptied in the same transaction).
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway_bot.state.database import Database, Migration, Transaction

VERSIONS = "schema_versions"
_NAME = re.compile(r"[a-z_][a-z0-9_]*")


class CopyRefused(RuntimeError):
    """The copy cannot be made as asked; nothing was written to the target's tables."""


@dataclass(frozen=True)
class CopiedTable:
    name: str
    source_rows: int
    target_rows: int


@dataclass(frozen=True)
class _Snapshot:
    versions: dict[str, int]
    order: list[str]
    columns: dict[str, list[str]]
    rows: dict[str, list[tuple[Any, ...]]]


async def copy_state(
    source: Path,
    target: Database,
    owners: Mapping[str, Sequence[Migration]],
    *,
    replace: bool = False,
) -> list[CopiedTable]:
    """Copy every table of the SQLite file ``source`` into the open ``target``; returns
    each table's counts (equal, or CopyRefused was raised and the copy rolled back)."""
    if not await asyncio.to_thread(source.is_file):
        raise CopyRefused(f"no SQLite state database at {source}")
    snapshot = await asyncio.to_thread(_read, source)
    for owner, version in sorted(snapshot.versions.items()):
        if owner not in owners:
            raise CopyRefused(f"the source has tables of {owner!r}, unknown to this gateway-bot")
        if version > len(owners[owner]):
            raise CopyRefused(f"the source's {owner!r} schema is newer: upgrade gateway-bot")
        await target.migrate(owner, owners[owner][:version])
    for table in snapshot.order:
        missing = set(snapshot.columns[table]) - set(await target.backend.table_columns(table))
        if missing:
            raise CopyRefused(f"the target's table {table} lacks {sorted(missing)}")
    async with target.transaction() as transaction:
        for table in snapshot.order:
            held = await _count(transaction, table)
            if held and not replace:
                raise CopyRefused(
                    f"the target already holds rows ({table}: {held}); "
                    "copy into an empty database, or pass --replace"
                )
        for table in reversed(snapshot.order if replace else []):
            await transaction.execute(f"DELETE FROM {table}")
        for table in snapshot.order:
            columns = ", ".join(["rowid", *snapshot.columns[table]])
            marks = ", ".join("?" * (len(snapshot.columns[table]) + 1))
            for row in snapshot.rows[table]:
                await transaction.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})", row)
            if target.dialect == "postgresql":
                await _continue_identities(transaction, table)
        copied = [
            CopiedTable(table, len(snapshot.rows[table]), await _count(transaction, table))
            for table in snapshot.order
        ]
        wrong = [c for c in copied if c.source_rows != c.target_rows]
        if wrong:
            raise CopyRefused(f"row counts differ, nothing kept: {wrong}")
    return copied


async def _count(transaction: Transaction, table: str) -> int:
    row = await transaction.fetch_one(f"SELECT COUNT(*) FROM {table}")
    return int(row[0]) if row else 0


async def _continue_identities(transaction: Transaction, table: str) -> None:
    """Identity columns (``rowid``, an INTEGER PRIMARY KEY) carry on after the copied
    values, so the next insert does not collide with a copied row."""
    rows = await transaction.fetch_all(
        "SELECT column_name FROM information_schema.columns WHERE table_schema ="
        " current_schema() AND table_name = ? AND is_identity = 'YES'",
        (table,),
    )
    for (column,) in rows:
        await transaction.fetch_one(
            f"SELECT setval(pg_get_serial_sequence(?, ?),"
            f" (SELECT COALESCE(MAX({column}), 0) + 1 FROM {table}), false)",
            (table, column),
        )


def _read(path: Path) -> _Snapshot:
    """Every table of the file in one read transaction, parents before children."""
    uri = f"{path.resolve().as_uri()}?mode=ro"
    connection = sqlite3.connect(uri, uri=True, timeout=30, isolation_level=None)
    try:
        connection.execute("BEGIN")
        tables = [
            str(r[0])
            for r in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        versions: dict[str, int] = {}
        if VERSIONS in tables:
            versions = {
                str(o): int(v)
                for o, v in connection.execute(f"SELECT owner, version FROM {VERSIONS}")
            }
            tables.remove(VERSIONS)
        odd = [t for t in tables if not _NAME.fullmatch(t)]
        if odd:
            raise CopyRefused(f"{path} has tables gateway-bot never makes: {odd}")
        if not versions:
            raise CopyRefused(f"{path} has no schema versions: start gateway-bot on it once first")
        parents = {
            table: {str(r[2]) for r in connection.execute(f"PRAGMA foreign_key_list({table})")}
            for table in tables
        }
        columns = {
            table: [str(r[1]) for r in connection.execute(f"PRAGMA table_info({table})")]
            for table in tables
        }
        rows = {
            table: connection.execute(
                f"SELECT rowid, {', '.join(columns[table])} FROM {table} ORDER BY rowid"
            ).fetchall()
            for table in tables
        }
        connection.execute("COMMIT")
    finally:
        connection.close()
    return _Snapshot(versions, _parents_first(tables, parents), columns, rows)


def _parents_first(tables: list[str], parents: dict[str, set[str]]) -> list[str]:
    order: list[str] = []
    placed: set[str] = set()

    def place(table: str, path: tuple[str, ...]) -> None:
        if table in placed or table in path:
            return
        for parent in sorted(parents.get(table, set()) & set(tables)):
            place(parent, (*path, table))
        placed.add(table)
        order.append(table)

    for table in tables:
        place(table, ())
    return order
