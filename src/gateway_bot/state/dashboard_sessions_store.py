"""The dashboard's logins, in the shared database (owner "dashboard"). Written by
``dashboard/sessions.py`` only.

A row is a session: the digest of the secret its cookie carries (never the secret: a
copy of the database opens no dashboard), which login token it was made with, when it was
made, last used, and ends. Logging out deletes the row; so does every other way a session
ends (``end_all``, a changed login token, the idle or absolute limit), so a row that exists
is a session that may still be used. Kept here rather than in the daemon's memory so a
restart keeps operators logged in (as the signed cookies did) and so every replica on a
shared database honours a logout made through another.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway_bot.state.database import Database

OWNER = "dashboard"

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE dashboard_sessions (
        digest TEXT PRIMARY KEY,
        token_mark TEXT NOT NULL,
        created_at REAL NOT NULL,
        last_used_at REAL NOT NULL,
        expires_at REAL NOT NULL
    );
    """,
)


@dataclass(frozen=True)
class SessionRow:
    digest: str
    token_mark: str
    """A keyed digest of the login token the session was made with: a session made with
    a token no longer configured is over."""
    created_at: float
    last_used_at: float
    expires_at: float


class DashboardSessions:
    def __init__(self, database: Database) -> None:
        self._db = database
        self._ready = False

    async def _ensure(self) -> None:
        if not self._ready:
            await self._db.migrate(OWNER, MIGRATIONS)
            self._ready = True

    async def add(self, row: SessionRow) -> None:
        await self._ensure()
        await self._db.write(
            "INSERT INTO dashboard_sessions"
            " (digest, token_mark, created_at, last_used_at, expires_at) VALUES (?, ?, ?, ?, ?)",
            (row.digest, row.token_mark, row.created_at, row.last_used_at, row.expires_at),
        )

    async def get(self, digest: str) -> SessionRow | None:
        await self._ensure()
        found = await self._db.fetch_one(
            "SELECT digest, token_mark, created_at, last_used_at, expires_at"
            " FROM dashboard_sessions WHERE digest = ?",
            (digest,),
        )
        if found is None:
            return None
        return SessionRow(
            str(found[0]), str(found[1]), float(found[2]), float(found[3]), float(found[4])
        )

    async def touch(self, digest: str, at: float) -> None:
        """Record a use. Not durable: a power cut at worst shortens the idle window."""
        await self._ensure()
        await self._db.write(
            "UPDATE dashboard_sessions SET last_used_at = ? WHERE digest = ? AND last_used_at < ?",
            (at, digest, at),
            durable=False,
        )

    async def end(self, digest: str) -> None:
        await self._ensure()
        await self._db.write("DELETE FROM dashboard_sessions WHERE digest = ?", (digest,))

    async def end_all(self) -> int:
        """Every session, at once ("log out everywhere"); returns how many ended."""
        await self._ensure()
        return await self._db.write("DELETE FROM dashboard_sessions")

    async def end_stale(self, token_mark: str, used_before: float, now: float) -> int:
        """Sessions of another login token, idle since before ``used_before``, or past
        their end: the sweep at start (a rotated token) and now and then."""
        await self._ensure()
        return await self._db.write(
            "DELETE FROM dashboard_sessions"
            " WHERE token_mark <> ? OR last_used_at < ? OR expires_at <= ?",
            (token_mark, used_before, now),
        )
