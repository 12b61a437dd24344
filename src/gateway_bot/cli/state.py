"""``gateway-bot migrate`` and ``gateway-bot state copy``: the state database's commands.

Both need every owner's migrations (the core's and each channel's), so the list of owners
lives here, above the layers, rather than in ``state`` (which never imports a channel).
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path

from gateway_bot.cli.exit_codes import EXIT_REFUSED
from gateway_bot.state import migrations as core
from gateway_bot.state.backend import is_postgres_url
from gateway_bot.state.copy import CopiedTable, CopyRefused, copy_state
from gateway_bot.state.database import (
    Database,
    Migration,
    SchemaTooNew,
    StateTarget,
    StateUnavailable,
)


def owners() -> dict[str, Sequence[Migration]]:
    """Every owner of tables in the state database and its migrations, the core first
    (the channels' stores are imported only when this runs: matrix-nio alone is ~0.7 s)."""
    from gateway_bot.channels.factory import channel_owners
    from gateway_bot.state.owners import state_owners

    return {**state_owners(), **channel_owners()}


def run_migrate(target: StateTarget) -> int:
    try:
        lines = asyncio.run(_migrate(target))
    except (SchemaTooNew, StateUnavailable) as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_REFUSED
    except OSError as exc:  # a state_dir that cannot be made: one line, no traceback
        print(f"cannot open the state database {_shown(target)}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    print("\n".join(lines))
    return 0


async def migrate_all(database: Database) -> dict[str, list[int]]:
    """Every owner's pending migrations (the core's former PRAGMA version adopted first, as
    the store does); the versions applied, per owner."""
    legacy = await database.backend.legacy_user_version()
    if legacy:
        await database.adopt_version(core.OWNER, legacy)
    return {owner: await database.migrate(owner, steps) for owner, steps in owners().items()}


async def _migrate(target: StateTarget) -> list[str]:
    database = Database(pool_size=1)
    await database.open(target)
    try:
        applied = await migrate_all(database)
        lines = [f"state database: {_shown(target)} ({database.dialect})"]
        for owner, numbers in applied.items():
            version = await database.schema_version(owner)
            done = f"applied {', '.join(map(str, numbers))}" if numbers else "up to date"
            lines.append(f"  {owner}: {done} (schema version {version})")
        return lines
    finally:
        await database.close()


def run_state_copy(source: str, target: str, *, replace: bool) -> int:
    path = _sqlite_path(source)
    if path is None:
        print(f"--from must be sqlite:///path/to/state.db, not {source!r}", file=sys.stderr)
        return EXIT_REFUSED
    if not is_postgres_url(target) and _sqlite_path(target) is None:
        print(f"--to must be a postgresql:// URL, not {_shown(target)!r}", file=sys.stderr)
        return EXIT_REFUSED
    destination: StateTarget = _sqlite_path(target) or target
    if isinstance(destination, Path) and destination.resolve() == path.resolve():
        print("state copy refused: --from and --to are the same database", file=sys.stderr)
        return EXIT_REFUSED
    try:
        copied = asyncio.run(_copy(path, destination, replace=replace))
    except (CopyRefused, SchemaTooNew, StateUnavailable) as exc:
        print(f"state copy refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except (OSError, sqlite3.DatabaseError) as exc:
        # A --to in a directory that cannot be made, a --from that is no SQLite database:
        # one line, not a traceback (the copy's transaction rolled back or never began).
        print(f"state copy failed: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    width = max((len(c.name) for c in copied), default=5)
    print(f"{'TABLE'.ljust(width)}  {'SOURCE':>8}  {'TARGET':>8}")
    for table in copied:
        print(f"{table.name.ljust(width)}  {table.source_rows:>8}  {table.target_rows:>8}")
    total = sum(c.target_rows for c in copied)
    print(
        f"copied {total} rows in {len(copied)} tables from {path} to {_shown(target)}; "
        "every table's row count matches"
    )
    return 0


async def _copy(source: Path, target: StateTarget, *, replace: bool) -> list[CopiedTable]:
    database = Database(pool_size=1)
    await database.open(target)
    try:
        return await copy_state(source, database, owners(), replace=replace)
    finally:
        await database.close()


def _sqlite_path(location: str) -> Path | None:
    prefix = "sqlite://"
    if not location.startswith(prefix):
        return None
    rest = location[len(prefix) :]
    return Path(rest) if rest.startswith("/") else None


def _shown(target: StateTarget) -> str:
    """A URL without its password (printed and logged)."""
    text = str(target)
    if "://" in text and "@" in text.split("://", 1)[1]:
        scheme, rest = text.split("://", 1)
        credentials, host = rest.rsplit("@", 1)
        user = credentials.split(":", 1)[0]
        return f"{scheme}://{user}@{host}"
    return text
