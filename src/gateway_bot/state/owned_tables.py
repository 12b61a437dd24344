"""An owner's tables in the shared database, migrated on first use.

Channel stores are built before the database is open (the daemon opens it at start), so
they cannot migrate in their constructor: the first call that needs the tables migrates
them (and imports the owner's former own SQLite file, once), under a lock so concurrent
first calls migrate once."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gateway_bot.state.database import Database
from gateway_bot.state.legacy_files import import_legacy_file


@dataclass(frozen=True)
class LegacyFile:
    """A channel's former own file: its path, (table, columns) to copy, and the prefix its
    tables have in the shared database."""

    path: Path
    tables: Sequence[tuple[str, str]]
    prefix: str


class OwnedTables:
    def __init__(
        self,
        database: Database,
        owner: str,
        migrations: Sequence[str],
        legacy: LegacyFile | None = None,
    ) -> None:
        self._database = database
        self._owner = owner
        self._migrations = migrations
        self._legacy = legacy
        self._ready = False
        self._readying = asyncio.Lock()

    async def ready(self) -> Database:
        """The database with this owner's tables at their latest version."""
        if not self._ready:
            async with self._readying:
                if not self._ready:
                    await self._database.migrate(self._owner, self._migrations)
                    if self._legacy is not None:
                        legacy = self._legacy
                        await import_legacy_file(
                            self._database, legacy.path, legacy.tables, legacy.prefix
                        )
                    self._ready = True
        return self._database
