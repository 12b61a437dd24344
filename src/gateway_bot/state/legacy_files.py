"""Copying a channel's former own SQLite file into the shared state database, once.

Before per-owner migrations (``state/database.py``), the Matrix and Slack channels each
kept a file of their own (``<state_dir>/matrix/matrix.db``, ``<state_dir>/slack/slack.db``).
Their rows matter after an upgrade: the sync token (without it the first sync starts fresh
and skips what arrived while the daemon was down), the login (else a new device), cards
(reactions to a pending card), and post/upload intents of in-flight tasks (else a
duplicate post). So the first start copies them over and renames the file.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gateway_bot.state.database import Database, Params

log = logging.getLogger(__name__)


async def import_legacy_file(
    database: Database, path: Path, tables: Iterable[tuple[str, str]], prefix: str
) -> int:
    """Copy a channel's former own SQLite file into its tables in ``database`` (table
    ``T`` into ``prefix + T``, the named columns), in one transaction, then rename the file
    ``<name>.migrated``. Rows already present are kept (ON CONFLICT DO NOTHING), so a crash
    between the commit and the rename only repeats a harmless copy. Returns the rows read.
    """
    if not await asyncio.to_thread(path.is_file):
        return 0
    tables = list(tables)
    rows = await asyncio.to_thread(_read_legacy, path, tables)
    statements: list[tuple[str, Params]] = []
    for (table, columns), table_rows in zip(tables, rows, strict=True):
        marks = ", ".join("?" * len(columns.split(",")))
        sql = f"INSERT INTO {prefix}{table} ({columns}) VALUES ({marks}) ON CONFLICT DO NOTHING"
        statements += [(sql, row) for row in table_rows]
    await database.write_batch(statements)
    await asyncio.to_thread(path.rename, path.with_name(path.name + ".migrated"))
    log.info("state: copied %d rows from %s into the state database", len(statements), path)
    return len(statements)


def _read_legacy(path: Path, tables: list[tuple[str, str]]) -> list[list[tuple[Any, ...]]]:
    """Read every table (a missing one reads as empty: old files predate some tables).
    Opened read-write so SQLite folds a leftover WAL into the file before the rename."""
    connection = sqlite3.connect(path, timeout=30)
    try:
        known = {r[0] for r in connection.execute("SELECT name FROM sqlite_master")}
        return [
            connection.execute(f"SELECT {columns} FROM {table}").fetchall()
            if table in known
            else []
            for table, columns in tables
        ]
    finally:
        connection.close()
