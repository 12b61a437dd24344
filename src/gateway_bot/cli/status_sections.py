"""The ``status`` sections that come from optional owners' tables: pending action approvals
(decision 0087) and replicas with their leases and conversation claims (``ha``). Each is read
only when its owner's tables exist, so a deployment that never used them shows nothing."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gateway_bot.cli.status_format import age, preview, table
from gateway_bot.state.action_approvals_store import OWNER as ACTIONS_OWNER
from gateway_bot.state.action_approvals_store import ActionApprovalRecord, SqlActionApprovals
from gateway_bot.state.leases_store import GroupView, read_group
from gateway_bot.state.sql_store import SqlStore


async def pending_actions(database: Path | str) -> list[ActionApprovalRecord]:
    """What the agents wait for (decision 0087); none when approvals never ran here."""
    store = SqlStore(database)
    await store.open_read_only()
    try:
        if await store.database.schema_version(ACTIONS_OWNER) is None:
            return []
        return await SqlActionApprovals(store.database).pending()
    finally:
        await store.close()


async def read_replicas(database: Path | str) -> GroupView | None:
    """Replicas, leases and conversation claims (``ha``), when replicas ever ran here."""
    store = SqlStore(database)
    await store.open_read_only()
    try:
        return await read_group(store.database)
    finally:
        await store.close()


def action_json(action: ActionApprovalRecord) -> dict[str, Any]:
    return {
        "code": action.code,
        "kind": action.kind,
        "conversation_id": action.conversation_id,
        "task_id": action.task_id,
        "summary": preview(action.summary),
        "rule": action.rule,
        "created_at": action.created_at,
        "expires_at": action.expires_at,
    }


def actions_text(actions: Sequence[ActionApprovalRecord]) -> str:
    now = time.time()
    rows = [
        [a.code, a.kind, a.conversation_id, a.task_id or "-", age(now - a.created_at),
         preview(a.summary)]
        for a in actions
    ]  # fmt: skip
    columns = ["CODE", "KIND", "CONVERSATION", "TASK", "AGE", "WHAT"]
    return "\n" + "\n".join(table("Pending action approvals", columns, rows))


def group_json(group: GroupView, now: float) -> dict[str, Any]:
    return {
        "replicas": [
            {"id": r.id, "host": r.host, "pid": r.pid, "started_at": r.started_at,
             "heartbeat_at": r.heartbeat_at, "expires_at": r.expires_at,
             "alive": r.expires_at >= now}
            for r in group.replicas
        ],
        "leases": [
            {"name": lease.name, "holder": lease.holder, "token": lease.token,
             "acquired_at": lease.acquired_at, "expires_at": lease.expires_at,
             "held": lease.holder is not None and lease.expires_at >= now}
            for lease in group.leases
        ],
        "conversation_claims": [
            {"conversation_id": c.conversation_id, "replica": c.replica, "token": c.token,
             "claimed_at": c.claimed_at}
            for c in group.claims
        ],
    }  # fmt: skip


def group_text(group: GroupView, now: float) -> list[str]:
    """Which replica is alive, which holds which listener (and the sweep), which runs
    which conversation now."""

    def expiry(at: float) -> str:
        return f"in {age(at - now)}" if at >= now else f"expired {age(now - at)} ago"

    lines = table(
        "Replicas",
        ["REPLICA", "HOST", "PID", "HEARTBEAT", "STATE"],
        [
            [r.id, r.host, str(r.pid), f"{age(now - r.heartbeat_at)} ago",
             "alive" if r.expires_at >= now else "missed its heartbeat"]
            for r in group.replicas
        ],
    )  # fmt: skip
    lines += table(
        "Leases",
        ["LEASE", "HOLDER", "TOKEN", "EXPIRES"],
        [
            [lease.name, lease.holder or "-", str(lease.token), expiry(lease.expires_at)]
            for lease in group.leases
        ],
    )
    lines += table(
        "Conversations running on a replica",
        ["CONVERSATION", "REPLICA", "TOKEN", "SINCE"],
        [
            [c.conversation_id, c.replica or "-", str(c.token), age(now - c.claimed_at)]
            for c in group.claims
        ],
    )
    return lines
