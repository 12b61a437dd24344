"""Replicas, leases and conversation claims in the shared state database (owner ``ha``).

Several daemons on one database (decision 0093, "replicas that fail over") agree on three things
here, and nowhere else:

* ``ha_replicas``: who is alive. Each replica renews its row's ``expires_at``; a row past
  it belongs to a dead replica, whose conversation claims whoever notices releases.
* ``ha_leases``: which replica runs a singleton (a channel's listener, the sweep). A lease
  row has a holder, a fencing ``token`` incremented at every take-over, and ``expires_at``.
  It is taken only when free or expired, renewed only by its holder with its token.
* ``ha_conversation_claims``: which replica runs a conversation's tasks now. One claim per
  conversation, taken only when free (``replica IS NULL``), released when the replica's
  queue of that conversation is empty, and released for it when it died; its ``token`` goes
  up at every claim, so a replica that lost a claim cannot record a reply
  (``record_reply_fenced``: the token is checked in the transaction that writes).

Every statement is portable between SQLite and PostgreSQL (no ``INSERT OR ...``; ``ON
CONFLICT``; DOUBLE PRECISION times) and uses only ``Database``'s methods. Times are epoch
seconds from the caller's clock: replicas on several hosts need synchronised clocks (NTP),
and the lease's safety margin covers the skew.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from gateway_bot.domain.messages import Reply
from gateway_bot.state.database import Database
from gateway_bot.state.owned_tables import OwnedTables

OWNER = "ha"

HA_MIGRATIONS: tuple[str, ...] = (
    # 1: replicas, leases, conversation claims. IF NOT EXISTS: two replicas started at
    # once on a fresh database may both apply it.
    """
    CREATE TABLE IF NOT EXISTS ha_replicas (
        id TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        started_at DOUBLE PRECISION NOT NULL,
        heartbeat_at DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    );
    CREATE TABLE IF NOT EXISTS ha_leases (
        name TEXT PRIMARY KEY,
        holder TEXT,
        token INTEGER NOT NULL DEFAULT 0,
        acquired_at DOUBLE PRECISION NOT NULL DEFAULT 0,
        expires_at DOUBLE PRECISION NOT NULL DEFAULT 0
    );
    CREATE TABLE IF NOT EXISTS ha_conversation_claims (
        conversation_id TEXT PRIMARY KEY,
        replica TEXT,
        token INTEGER NOT NULL DEFAULT 0,
        claimed_at DOUBLE PRECISION NOT NULL DEFAULT 0
    );
    CREATE INDEX IF NOT EXISTS ha_conversation_claims_replica ON ha_conversation_claims(replica);
    """,
)

_UNFINISHED = ("pending", "executing")


@dataclass(frozen=True)
class ReplicaRow:
    id: str
    host: str
    pid: int
    started_at: float
    heartbeat_at: float
    expires_at: float


@dataclass(frozen=True)
class LeaseRow:
    name: str
    holder: str | None
    token: int
    acquired_at: float
    expires_at: float


@dataclass(frozen=True)
class ClaimRow:
    conversation_id: str
    replica: str | None
    token: int
    claimed_at: float


@dataclass(frozen=True)
class GroupView:
    """Everything ``gateway-bot status`` shows of the replicas."""

    replicas: list[ReplicaRow]
    leases: list[LeaseRow]
    claims: list[ClaimRow]


async def read_group(database: Database) -> GroupView | None:
    """The replicas, leases and claims, by reads only (``status`` opens the database
    read-only); None when no replica ever ran on this database."""
    if await database.schema_version(OWNER) is None:
        return None
    return GroupView(await _replicas(database), await _leases(database), await _claims(database))


async def _replicas(db: Database) -> list[ReplicaRow]:
    rows = await db.fetch_all(
        "SELECT id, host, pid, started_at, heartbeat_at, expires_at FROM ha_replicas"
        " ORDER BY started_at, id"
    )
    return [ReplicaRow(str(r[0]), str(r[1]), int(r[2]), *map(float, r[3:6])) for r in rows]


async def _leases(db: Database) -> list[LeaseRow]:
    rows = await db.fetch_all(
        "SELECT name, holder, token, acquired_at, expires_at FROM ha_leases ORDER BY name"
    )
    return [LeaseRow(str(r[0]), r[1], int(r[2]), float(r[3]), float(r[4])) for r in rows]


async def _claims(db: Database) -> list[ClaimRow]:
    rows = await db.fetch_all(
        "SELECT conversation_id, replica, token, claimed_at FROM ha_conversation_claims"
        " WHERE replica IS NOT NULL ORDER BY claimed_at"
    )
    return [ClaimRow(str(r[0]), r[1], int(r[2]), float(r[3])) for r in rows]


class LeaseStore:
    def __init__(self, database: Database) -> None:
        self._tables = OwnedTables(database, OWNER, HA_MIGRATIONS)

    async def _db(self) -> Database:
        return await self._tables.ready()

    # -- replicas ----------------------------------------------------------------------

    async def register(self, replica: str, host: str, pid: int, now: float, lease_s: float) -> None:
        db = await self._db()
        await db.write(
            "INSERT INTO ha_replicas (id, host, pid, started_at, heartbeat_at, expires_at)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET"
            " heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at",
            (replica, host, pid, now, now, now + lease_s),
        )

    async def rejoin(self, replica: str, host: str, pid: int, now: float, lease_s: float) -> None:
        """A replica declared dead while alive joins again: the claims the database still
        gives it (taken back before it knew) become free, as its burial made the others."""
        db = await self._db()
        await db.write(
            "UPDATE ha_conversation_claims SET replica = NULL WHERE replica = ?", (replica,)
        )
        await self.register(replica, host, pid, now, lease_s)

    async def heartbeat(self, replica: str, now: float, lease_s: float) -> bool:
        """False when the row is gone: another replica declared this one dead."""
        db = await self._db()
        count = await db.write(
            "UPDATE ha_replicas SET heartbeat_at = ?, expires_at = ? WHERE id = ?",
            (now, now + lease_s, replica),
        )
        return count == 1

    async def replicas(self) -> list[ReplicaRow]:
        return await _replicas(await self._db())

    async def bury(self, replica: str, now: float) -> bool:
        """Declare ``replica`` dead if its heartbeat expired (or it left): its conversation
        claims become free (their tokens stay, and go up at the next claim) and its row
        goes. True when this call buried it (exactly one caller does)."""
        db = await self._db()
        gone = await db.write(
            "DELETE FROM ha_replicas WHERE id = ? AND expires_at < ?", (replica, now)
        )
        if gone != 1:
            return False
        await db.write(
            "UPDATE ha_conversation_claims SET replica = NULL WHERE replica = ?", (replica,)
        )
        return True

    async def leave(self, replica: str) -> None:
        """A clean stop: claims and leases free at once, the row gone."""
        db = await self._db()
        await db.write_batch(
            [
                ("UPDATE ha_conversation_claims SET replica = NULL WHERE replica = ?", (replica,)),
                ("UPDATE ha_leases SET expires_at = 0 WHERE holder = ?", (replica,)),
                ("DELETE FROM ha_replicas WHERE id = ?", (replica,)),
            ]
        )

    # -- leases ------------------------------------------------------------------------

    async def acquire(self, name: str, holder: str, now: float, lease_s: float) -> int | None:
        """Take the lease if it is free or expired; its new fencing token, or None."""
        db = await self._db()
        await db.write(
            "INSERT INTO ha_leases (name, holder, token, acquired_at, expires_at)"
            " VALUES (?, NULL, 0, 0, 0) ON CONFLICT (name) DO NOTHING",
            (name,),
        )
        taken = await db.write(
            "UPDATE ha_leases SET holder = ?, token = token + 1, acquired_at = ?, expires_at = ?"
            " WHERE name = ? AND (holder IS NULL OR expires_at < ?)",
            (holder, now, now + lease_s, name, now),
        )
        if taken != 1:
            return None
        row = await db.fetch_one(
            "SELECT token FROM ha_leases WHERE name = ? AND holder = ?", (name, holder)
        )
        return int(row[0]) if row is not None else None

    async def renew(self, name: str, holder: str, token: int, now: float, lease_s: float) -> bool:
        """Extend the lease; False when it is no longer this holder's (expired and taken)."""
        db = await self._db()
        count = await db.write(
            "UPDATE ha_leases SET expires_at = ?"
            " WHERE name = ? AND holder = ? AND token = ? AND expires_at >= ?",
            (now + lease_s, name, holder, token, now),
        )
        return count == 1

    async def release(self, name: str, holder: str, token: int) -> None:
        db = await self._db()
        await db.write(
            "UPDATE ha_leases SET expires_at = 0 WHERE name = ? AND holder = ? AND token = ?",
            (name, holder, token),
        )

    async def holds(self, name: str, holder: str, token: int, now: float) -> bool:
        db = await self._db()
        row = await db.fetch_one(
            "SELECT 1 FROM ha_leases WHERE name = ? AND holder = ? AND token = ?"
            " AND expires_at >= ?",
            (name, holder, token, now),
        )
        return row is not None

    async def leases(self) -> list[LeaseRow]:
        return await _leases(await self._db())

    # -- conversation claims ---------------------------------------------------------------

    async def claimable(self, limit: int, but_channels: Sequence[str] = ()) -> list[str]:
        """Conversations with unfinished tasks (pending or executing) that no replica
        claims, oldest task first; none of ``but_channels`` (whose sends this replica
        cannot make)."""
        db = await self._db()
        skip = "".join(" AND t.channel <> ?" for _ in but_channels)
        rows = await db.fetch_all(
            "SELECT t.conversation_id, MIN(t.created_at) AS first FROM tasks t"
            " LEFT JOIN ha_conversation_claims c ON c.conversation_id = t.conversation_id"
            " WHERE t.state IN (?, ?) AND t.conversation_id IS NOT NULL AND c.replica IS NULL"
            f"{skip} GROUP BY t.conversation_id ORDER BY first LIMIT ?",
            (*_UNFINISHED, *but_channels, limit),
        )
        return [str(r[0]) for r in rows]

    async def claim(self, conversation_id: str, replica: str, now: float) -> int | None:
        """Claim a free conversation; its new token, or None when another replica has it."""
        db = await self._db()
        await db.write(
            "INSERT INTO ha_conversation_claims (conversation_id, replica, token, claimed_at)"
            " VALUES (?, NULL, 0, 0) ON CONFLICT (conversation_id) DO NOTHING",
            (conversation_id,),
        )
        taken = await db.write(
            "UPDATE ha_conversation_claims SET replica = ?, token = token + 1, claimed_at = ?"
            " WHERE conversation_id = ? AND replica IS NULL",
            (replica, now, conversation_id),
        )
        if taken != 1:
            return None
        row = await db.fetch_one(
            "SELECT token FROM ha_conversation_claims WHERE conversation_id = ? AND replica = ?",
            (conversation_id, replica),
        )
        return int(row[0]) if row is not None else None

    async def unclaim(self, conversation_id: str, replica: str, token: int) -> bool:
        db = await self._db()
        count = await db.write(
            "UPDATE ha_conversation_claims SET replica = NULL"
            " WHERE conversation_id = ? AND replica = ? AND token = ?",
            (conversation_id, replica, token),
        )
        return count == 1

    async def claims(self) -> list[ClaimRow]:
        return await _claims(await self._db())

    async def pending_of(self, replica: str) -> list[tuple[str, str]]:
        """(conversation id, task id) of the pending tasks in conversations ``replica``
        claims, in arrival order: tasks another replica's intake routed there."""
        db = await self._db()
        rows = await db.fetch_all(
            "SELECT t.conversation_id, t.id FROM tasks t"
            " JOIN ha_conversation_claims c ON c.conversation_id = t.conversation_id"
            " WHERE c.replica = ? AND t.state = 'pending' ORDER BY t.created_at",
            (replica,),
        )
        return [(str(r[0]), str(r[1])) for r in rows]

    async def record_reply_fenced(
        self, task_id: str, reply: Reply, conversation_id: str, replica: str, token: int
    ) -> bool:
        """Store a task's reply only while ``replica`` still holds the conversation's claim
        with ``token``, checked in the same transaction as the write: a replica whose claim
        was taken over (it was declared dead, then woke up) is refused, and must not send.

        The first statement touches the claim row under the same condition, which on
        PostgreSQL locks it until the commit, so a take-over (which updates that row) either
        committed before (the write then finds another holder and does nothing) or waits
        until after (and then finds the reply stored: it delivers it, never re-runs). SQLite
        serialises the whole transaction. Whether the write happened is read back: a stored
        reply is never replaced (``reply_json IS NULL``)."""
        db = await self._db()
        stored = json.dumps(reply.to_json())
        claim = (conversation_id, replica, token)
        await db.write_batch(
            [
                (
                    "UPDATE ha_conversation_claims SET claimed_at = claimed_at"
                    " WHERE conversation_id = ? AND replica = ? AND token = ?",
                    claim,
                ),
                (
                    "UPDATE tasks SET reply_json = ?"
                    " WHERE id = ? AND state = 'executing' AND reply_json IS NULL"
                    " AND EXISTS (SELECT 1 FROM ha_conversation_claims c"
                    " WHERE c.conversation_id = ? AND c.replica = ? AND c.token = ?)",
                    (stored, task_id, *claim),
                ),
            ]
        )
        row = await db.fetch_one("SELECT reply_json FROM tasks WHERE id = ?", (task_id,))
        return row is not None and row[0] == stored
