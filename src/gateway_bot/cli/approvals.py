"""``gateway-bot approvals`` (list what waits for an owner) and ``gateway-bot approve|deny CODE
--as OWNER`` (decide one from the shell).

The list is read from the state database opened read-only, as ``status`` reads it, so it
works with or without a daemon. A decision is asked of the running daemon over its control
socket (``runtime/control_socket.py``) and recorded as OWNER's decision, exactly as if OWNER pressed
the card's button; OWNER must be an owner or admin of the approval's channel.

Exit codes: 0 listed or decided, 1 refused (no such pending approval, not an owner), 3 no
state at all for this config, 4 no daemon is running to decide it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from gateway_bot.cli.exit_codes import EXIT_NO_DAEMON, EXIT_NO_STATE, EXIT_REFUSED
from gateway_bot.cli.status import approval_json
from gateway_bot.cli.status_format import age, preview, printable, table
from gateway_bot.domain.records import ApprovalRecord
from gateway_bot.runtime.control_socket import DaemonUnreachable, ask_daemon
from gateway_bot.state.sql_store import SqlStore


def run_list(state_dir: Path, *, as_json: bool, state_url: str | None = None) -> int:
    """``state_url``: the PostgreSQL database (``state.url``) instead of the SQLite file."""
    database: Path | str = state_url or state_dir / "state.db"
    if isinstance(database, Path) and not database.is_file():
        print(f"No gateway-bot state in {state_dir}: nothing has run here yet.", file=sys.stderr)
        return EXIT_NO_STATE
    pending = asyncio.run(_pending(database))
    if as_json:
        print(json.dumps([approval_json(a) for a in pending], indent=2))
        return 0
    now = time.time()
    rows = [
        [a.code, a.kind, a.channel, a.room, a.sender_name, age(now - a.created_at),
         preview(a.preview)]
        for a in pending
    ]  # fmt: skip
    lines = table("Pending approvals", ["CODE", "KIND", "CHANNEL", "ROOM", "SENDER", "AGE",
                                         "MESSAGE"], rows)  # fmt: skip
    print("\n".join(lines[1:]))
    if pending:
        print("\nDecide one with: gateway-bot approve|deny CODE --as OWNER")
    return 0


async def _pending(database: Path | str) -> list[ApprovalRecord]:
    store = SqlStore(database)
    await store.open_read_only()
    try:
        return await store.pending_approvals()
    finally:
        await store.close()


def run_decision(state_dir: Path, code: str, choice: str, owner: str) -> int:
    try:
        request = {"op": "decide", "code": code, "choice": choice, "as": owner}
        answer = ask_daemon(state_dir, request)
    except DaemonUnreachable as exc:
        print(
            f"The daemon is not running ({exc}): decide from chat, or start it "
            "(`gateway-bot run`) and try again.",
            file=sys.stderr,
        )
        return EXIT_NO_DAEMON
    text = str(answer.get("text", ""))
    text = printable(text)  # it names the sender: a stranger's escape sequences stay inert
    if answer.get("ok") is True:
        print(text)
        return 0
    print(text or "The daemon refused the decision.", file=sys.stderr)
    return EXIT_REFUSED
