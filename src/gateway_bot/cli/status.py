"""``gateway-bot status``: channels with their health, live containers, running and waiting
tasks, parked replies, pending approvals and schedules of a deployment, as a table or as JSON.

Tasks and approvals come from the state database, opened read-only (WAL lets it be read
while the daemon writes). Containers are asked of the sandbox (podman) now: they outlive
the daemon, and its last word about them would be stale (a container it left running was
stopped since). Channel health lives only in the daemon's memory: it comes from its status
snapshot (``core/status/snapshot.py``), and when that daemon is not running the output says
so and when that health was reported (docs/decisions/0122-status-asks-podman-now.md).

Exit codes: 0 the status was shown (also when no daemon runs: the note says so), 3 there is
no state at all for this config (no database and no snapshot: nothing ever ran here).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from gateway_bot.cli.exit_codes import EXIT_NO_STATE
from gateway_bot.cli.status_format import age, preview, table
from gateway_bot.cli.status_sections import (
    action_json,
    actions_text,
    group_json,
    group_text,
    pending_actions,
    read_replicas,
)
from gateway_bot.config.server import ServerConfig
from gateway_bot.core.application import Application, Overview
from gateway_bot.core.live_state import ChannelView
from gateway_bot.core.schedules.rules import show_time
from gateway_bot.core.status.snapshot import (
    Snapshot,
    daemon_alive,
    not_running_note,
    read_snapshot,
    reported_when,
    snapshot_path,
)
from gateway_bot.domain.records import ApprovalRecord, TaskRecord
from gateway_bot.sandbox.base import Sandbox, SandboxContainer
from gateway_bot.sandbox.factory import create_sandbox
from gateway_bot.state.schedules_store import SqlSchedules
from gateway_bot.state.sql_store import SqlStore


class StatusLiveState:
    """Channels as the daemon's last snapshot recorded them; containers as the sandbox
    lists them now."""

    def __init__(self, snapshot: Snapshot | None, sandbox: Sandbox) -> None:
        self._snapshot = snapshot
        self._sandbox = sandbox

    def channels(self) -> list[ChannelView]:
        return list(self._snapshot.channels) if self._snapshot else []

    async def containers(self) -> list[SandboxContainer]:
        return await self._sandbox.list_containers()


def run_status(config: ServerConfig, *, as_json: bool) -> int:
    state_dir = config.state_dir
    database: Path | str = config.state.url or state_dir / "state.db"
    snapshot = read_snapshot(snapshot_path(state_dir))
    if snapshot is None and isinstance(database, Path) and not database.is_file():
        print(
            f"No gateway-bot state in {state_dir}: nothing has run with this config yet.",
            file=sys.stderr,
        )
        return EXIT_NO_STATE
    present = not isinstance(database, Path) or database.is_file()
    live = StatusLiveState(snapshot, create_sandbox(config.sandbox, state_dir))
    overview = asyncio.run(_overview(database if present else None, live))
    actions = asyncio.run(pending_actions(database)) if present else []
    group = asyncio.run(read_replicas(database)) if present else None
    note = not_running_note(snapshot, time.time())
    if as_json:
        shown = status_json(state_dir, snapshot, note, overview)
        shown["action_approvals"] = [action_json(a) for a in actions]
        if group is not None:
            shown["replicas"] = group_json(group, time.time())
        print(json.dumps(shown, indent=2))
    else:
        text = status_text(state_dir, snapshot, note, overview) + actions_text(actions)
        if group is not None:
            text += "\n" + "\n".join(group_text(group, time.time()))
        print(text)
    return 0


async def _overview(database: Path | str | None, live: StatusLiveState) -> Overview:
    if database is None:
        try:
            containers, error = tuple(await live.containers()), ""
        except Exception as exc:  # shown beside the table, as the dashboard does
            containers, error = (), f"{type(exc).__name__}: {exc}"
        return Overview(tuple(live.channels()), containers, error, (), (), (), ())
    store = SqlStore(database)
    await store.open_read_only()
    try:
        schedules = SqlSchedules(store.database)
        return await Application(store, live, schedules=schedules).overview()
    finally:
        await store.close()


# -- JSON: stable keys ----------------------------------------------------------------------


def status_json(
    state_dir: Path, snapshot: Snapshot | None, note: str, overview: Overview
) -> dict[str, Any]:
    return {
        "state_dir": str(state_dir),
        "daemon": {
            "running": bool(
                snapshot and snapshot.stopped_at is None and daemon_alive(snapshot.pid)
            ),
            "pid": snapshot.pid if snapshot else None,
            "started_at": snapshot.started_at if snapshot else None,
            "updated_at": snapshot.written_at if snapshot else None,
            "sandbox": snapshot.sandbox if snapshot else None,
            "note": note or None,
        },
        "channels": [
            {"name": c.name, "health": c.health, "message": c.message} for c in overview.channels
        ],
        "channels_reported_at": snapshot.written_at if snapshot else None,
        "containers": [
            {
                "name": c.name,
                "conversation_id": c.context_id,
                "state": c.state,
                **({"host": c.host} if c.host else {}),  # several sandbox hosts
            }
            for c in overview.containers
        ],
        "containers_error": overview.containers_error or None,
        "tasks": {
            "running": [_task_json(t) for t in overview.running],
            "waiting": [_task_json(t) for t in overview.waiting],
            "undelivered": [_task_json(t) for t in overview.undelivered],
            "finished": [_task_json(t) for t in overview.finished],
        },
        "commands": [_task_json(t) for t in overview.commands],
        "approvals": [approval_json(a) for a in overview.pending_approvals],
        "schedules": [
            {
                "id": s.id,
                "channel": s.channel,
                "conversation_key": s.conversation_key,
                "conversation_id": s.conversation_id,
                "rule": s.rule,
                "timezone": s.timezone,
                "next_run": s.next_run,
                "paused": s.paused,
                "prompt": s.prompt,
                "creator_id": s.creator_id,
            }
            for s in overview.schedules
        ],
    }


def _task_json(task: TaskRecord) -> dict[str, Any]:
    return {
        "id": task.id,
        "state": task.state.value,
        "channel": task.channel,
        "conversation_id": task.conversation_id,
        "sender": _sender(task),
        "preview": _body(task),
        "created_at": task.created_at,
        "started_at": task.started_at,
        "delivery_error": task.delivery_error,
        "completed_at": task.completed_at,
        "outcome": task.completion_reason.value if task.completion_reason else None,
    }


def approval_json(approval: ApprovalRecord) -> dict[str, Any]:
    return {
        "code": approval.code,
        "kind": approval.kind,
        "channel": approval.channel,
        "room": approval.room,
        "room_title": approval.room_title,
        "sender_id": approval.sender_id,
        "sender_name": approval.sender_name,
        "preview": preview(approval.preview),
        "created_at": approval.created_at,
        "expires_at": approval.expires_at,
        "card_sent": approval.card_ref is not None,
    }


# -- plain text: readable tables --------------------------------------------------------------


def status_text(state_dir: Path, snapshot: Snapshot | None, note: str, overview: Overview) -> str:
    now = time.time()
    lines = [f"gateway-bot status · state {state_dir}"]
    if note:
        lines.append(note)
    elif snapshot is not None:
        lines.append(
            f"Daemon running: pid {snapshot.pid}, up {age(now - snapshot.started_at)}, "
            f"sandbox {snapshot.sandbox}."
        )
    heard = "Channels"
    if note and snapshot is not None:  # the daemon's memory, not now: say from when
        heard = f"Channels (as the daemon last reported, {reported_when(snapshot.written_at)})"
    lines += table(heard, ["NAME", "HEALTH", "MESSAGE"], [
        [c.name, c.health, c.message] for c in overview.channels
    ])  # fmt: skip
    containers = [[c.name, c.context_id, c.state] for c in overview.containers]
    if any(c.host for c in overview.containers):  # several sandbox hosts: say which
        hosted = [[c.name, c.context_id, c.state, c.host or ""] for c in overview.containers]
        lines += table("Containers", ["NAME", "CONVERSATION", "STATE", "HOST"], hosted)
    else:
        lines += table("Containers", ["NAME", "CONVERSATION", "STATE"], containers)
    if overview.containers_error:
        lines.append(f"  (could not list containers: {overview.containers_error})")
    task_columns = ["TASK", "CONVERSATION", "CHANNEL", "SENDER", "AGE", "MESSAGE"]
    for title, tasks in (
        ("Running tasks", overview.running),
        ("Waiting tasks", overview.waiting),
        ("Undelivered replies", overview.undelivered),
    ):
        lines += table(title, task_columns, [_task_row(t, now) for t in tasks])
    lines += table(
        "Recently finished",
        ["TASK", "CONVERSATION", "CHANNEL", "SENDER", "AGO", "OUTCOME", "MESSAGE"],
        [
            [t.id, t.conversation_id or "-", t.channel, _sender(t),
             age(now - (t.completed_at or t.created_at)),
             t.completion_reason.value if t.completion_reason else "-", _body(t)]
            for t in overview.finished
        ],
    )  # fmt: skip
    lines += table(
        "Recent commands",
        ["TASK", "CHANNEL", "SENDER", "AGO", "OUTCOME", "COMMAND"],
        [
            [t.id, t.channel, _sender(t), age(now - (t.completed_at or t.created_at)),
             t.completion_reason.value if t.completion_reason else "-", _body(t)]
            for t in overview.commands
        ],
    )  # fmt: skip
    lines += table(
        "Pending approvals",
        ["CODE", "KIND", "CHANNEL", "ROOM", "SENDER", "AGE", "MESSAGE"],
        [
            [a.code, a.kind, a.channel, a.room, a.sender_name, age(now - a.created_at),
             preview(a.preview)]
            for a in overview.pending_approvals
        ],
    )  # fmt: skip
    lines += table(
        "Schedules",
        ["ID", "CHANNEL", "WHERE", "CONVERSATION", "RULE", "NEXT RUN", "PROMPT"],
        [
            [f"#{s.id}", s.channel, s.conversation_key, s.conversation_id or "-", s.rule,
             "paused" if s.paused else _when(s.next_run, s.timezone), preview(s.prompt)]
            for s in overview.schedules
        ],
    )  # fmt: skip
    return "\n".join(lines)


def _when(stamp: float | None, timezone: str) -> str:
    return show_time(stamp, timezone) if stamp is not None else "none left"


def _task_row(task: TaskRecord, now: float) -> list[str]:
    since = task.started_at or task.created_at
    return [
        task.id,
        task.conversation_id or "-",
        task.channel,
        _sender(task),
        age(now - since),
        _body(task),
    ]


def _sender(task: TaskRecord) -> str:
    return task.parsed.sender_name if task.parsed else task.raw.sender


def _body(task: TaskRecord) -> str:
    return preview(task.parsed.body) if task.parsed else ""
