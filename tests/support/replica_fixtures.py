"""What the replica tests share (tests/test_replicas_*.py): one config run by several
daemons (replicas) on one state database, with a shell fake agent speaking Claude Code's
stream-json.

The agent is fast, and it logs each run's msg-C-N word to a file (so a test counts runs
across replicas); a prompt with SLOW waits for a gate file (a task a test kills mid-run).
The sandbox is the host's."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway_bot.state.database import Database
from tests.conftest import write_config
from tests.support.fake_anthropic import FakeAnthropic

LEASE_S = 3.0
"""For a test in which a replica dies or stops: its work moves within seconds."""
STEADY_LEASE_S = 30.0
"""For a test in which no replica is meant to fail over. A holder gives a lease up when a
renewal (a durable write) has not answered by a fifth of the lease before it expires: with
3 s, on a machine at load 30, a renewal missed that (1.4 s) and the Slack listener moved to
the other replica, failing a test that counts one listener; a heartbeat as late buries a
live replica, whose tasks then run twice."""

FAKE_AGENT = r"""#!/bin/sh
# Claude Code's stream-json, minimally. The reply names the message's msg-C-N word; each
# run is logged; a prompt with SLOW waits for the gate file.
prompt=$(cat)
word=$(printf '%s\n' "$prompt" | grep -o 'msg-[0-9]*-[0-9]*' | tail -n 1)
echo "$word" >> "{runs}"
case "$prompt" in
  *SLOW*) touch "{started}"; while [ ! -e "{gate}" ]; do sleep 0.05; done ;;
  *) sleep 0.2 ;;
esac
echo '{{"type":"system","subtype":"init","session_id":"fake-'$$'","model":"fake"}}'
echo '{{"type":"result","subtype":"success","is_error":false,"result":"Echo: '$word'",'\
'"session_id":"fake-'$$'","num_turns":1}}'
"""


class Deployment:
    """One config, one state directory (and maybe a PostgreSQL ``state_url``), any number
    of replicas of it. ``channels`` is the config's channels section; ``agent_script`` the
    fake agent (``str.format``ted with the ``runs``, ``started`` and ``gate`` paths and the
    ``python`` running the tests); ``agent_settings`` more keys of the agent section;
    ``lease_seconds`` the ``ha`` lease (``LEASE_S`` or ``STEADY_LEASE_S``); ``sections``
    more top-level keys."""

    def __init__(
        self,
        gateway: Any,
        tmp_path: Path,
        repo: Path,
        api: FakeAnthropic,
        channels: dict[str, Any],
        state_url: str | None = None,
        *,
        max_concurrent_tasks: int = 3,
        agent_script: str = FAKE_AGENT,
        agent_settings: dict[str, Any] | None = None,
        lease_seconds: float = LEASE_S,
        **sections: Any,
    ) -> None:
        self.gateway = gateway
        self.state: Path | str = state_url or tmp_path / "state" / "state.db"
        self.runs = tmp_path / "runs.log"
        self.started = tmp_path / "slow-started"
        self.gate = tmp_path / "slow-gate"
        agent = tmp_path / "fake-agent"
        agent.write_text(
            agent_script.format(
                runs=self.runs, started=self.started, gate=self.gate, python=sys.executable
            )
        )
        agent.chmod(0o755)
        self.config = write_config(
            tmp_path,
            repo,
            api,
            channels={"console": None, **channels},
            agent={"command": [str(agent)], "timeout_seconds": 60, **(agent_settings or {})},
            execution={"max_concurrent_tasks": max_concurrent_tasks},
            ha={"enabled": True, "lease_seconds": lease_seconds, "poll_seconds": 0.2},
            **({"state": {"url": state_url}} if state_url else {}),
            **sections,
        )
        self.replicas: list[Any] = []

    def start_replica(self, env: dict[str, str] | None = None) -> Any:
        """A replica that has joined the group (its listener lease may come later); ``env``:
        more variables for it (a test hook)."""
        replica = self.gateway("run", "--config", str(self.config), env=env)
        self.replicas.append(replica)
        # 120 s: at load 30 (this machine, 2026-11-26) a replica had logged nothing yet
        # after 60 s, still starting Python and importing.
        joined = lambda: "joined (lease" in replica.stderr  # noqa: E731
        wait_for(joined, "the replica to join", replica, timeout=120)
        return replica

    def runs_of(self) -> list[str]:
        """The msg-C-N word of every agent run, in the order they started."""
        return self.runs.read_text().split() if self.runs.exists() else []

    def tasks_of(self, key_end: str) -> list[tuple[Any, ...]]:
        """For a failure's message, read beside the replicas: the tasks of the conversations
        whose channel key ends with ``key_end`` (a Slack thread's root ts) and the tasks not
        routed to any yet, oldest first, each as (state, completion reason, error, the
        conversation claim's replica and token)."""

        async def read() -> list[tuple[Any, ...]]:
            database = Database()
            await database.open_read_only(self.state)
            try:
                rows = await database.fetch_all(
                    "SELECT t.state, t.completion_reason, t.error, h.replica, h.token"
                    " FROM tasks t"
                    " LEFT JOIN conversations c ON c.id = t.conversation_id"
                    " LEFT JOIN ha_conversation_claims h ON h.conversation_id = t.conversation_id"
                    " WHERE c.channel_key LIKE ? OR t.conversation_id IS NULL"
                    " ORDER BY t.created_at",
                    (f"%{key_end}",),
                )
            finally:
                await database.close()
            return [tuple(row) for row in rows]

        return asyncio.run(read())

    def print_logs(self) -> None:
        """For a failing test: what each replica logged."""
        for replica in self.replicas:
            print(f"--- replica {replica.process.pid} stderr ---\n{replica.stderr[-20000:]}")


def tasks_run(replica: Any, channel: str) -> int:
    """Tasks the replica started (its log says so for each)."""
    return len(re.findall(rf"task \S+ running \({channel}", replica.stderr))


def wait_for(check: Callable[[], Any], what: str, process: Any, timeout: float = 60) -> Any:
    """Poll ``check`` until it is true; fail saying what was awaited (and the process's
    log) on timeout or when the process ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        if process.process.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}; stderr:\n{process.stderr[-8000:]}")


def status(config: Path, *more: str) -> Any:
    """``gateway-bot status`` beside the replicas; its JSON when asked for."""
    done = subprocess.run(
        [sys.executable, "-m", "gateway_bot", "status", "--config", str(config), *more],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if more else done.stdout
