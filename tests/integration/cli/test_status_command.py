"""`gateway-bot status` beside a real daemon: the running task and the channel's health while
the agent works, the task completed afterwards, and a plain "no daemon is running" once it
has stopped. The daemon is the real `gateway-bot run` with the console channel; the agent
is the real claude CLI against the fake model API, held mid-request."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway_bot.domain.lifecycle import TaskState
from gateway_bot.domain.messages import InboundMessage, RawMessage
from gateway_bot.state.sql_store import SqlStore
from tests.conftest import gateway_env
from tests.support.fake_anthropic import FakeAnthropic


def status(config: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway_bot", "status", "--config", str(config), *more],
        capture_output=True,
        text=True,
        env=gateway_env(),
        timeout=60,
        check=False,
    )


def status_json(config: Path) -> dict[str, Any]:
    done = status(config, "--json")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def wait_for_status(
    config: Path, check: Callable[[dict[str, Any]], bool], what: str, within_s: float = 60
) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    while True:
        shown = status_json(config)
        if check(shown):
            return shown
        assert time.monotonic() < deadline, f"status never showed {what}: {shown}"
        time.sleep(0.2)


def test_status_follows_a_task_and_says_when_the_daemon_is_gone(
    gateway: Any, config_path: Path, fake_api: FakeAnthropic
) -> None:
    fake_api.hold("STATUS PROBE")
    daemon = gateway("run", "--config", str(config_path))
    daemon.send("STATUS PROBE: count the files")
    assert fake_api.wait_for_held(60), daemon.stderr

    shown = wait_for_status(
        config_path,
        lambda s: bool(s["tasks"]["running"]) and s["daemon"]["running"],
        "the running task",
    )
    assert shown["daemon"]["note"] is None
    assert shown["channels"] == [
        {"name": "console", "health": "connected", "message": "reading standard input"}
    ]
    [running] = shown["tasks"]["running"]
    assert running["preview"] == "STATUS PROBE: count the files"
    assert running["state"] == "executing"
    assert shown["tasks"]["waiting"] == []
    assert shown["containers"] == [], "sandbox none keeps no container"
    table = status(config_path)
    assert table.returncode == 0
    assert "Running tasks (1)" in table.stdout
    assert running["id"] in table.stdout

    fake_api.release()
    daemon.expect(r"^agent> Echo: STATUS PROBE: count the files$")
    shown = wait_for_status(config_path, lambda s: not s["tasks"]["running"], "the task done")
    assert shown["tasks"]["waiting"] == []
    [finished] = [t for t in shown["tasks"]["finished"] if t["id"] == running["id"]]
    assert finished["state"] == "completed"
    assert finished["outcome"] == "success"
    assert shown["daemon"]["running"]

    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr
    after = status(config_path)
    assert after.returncode == 0
    assert "No daemon is running" in after.stdout
    assert status_json(config_path)["daemon"]["running"] is False


def test_status_after_a_killed_daemon_names_its_pid(
    gateway: Any, config_path: Path, fake_api: FakeAnthropic
) -> None:
    daemon = gateway("run", "--config", str(config_path))
    daemon.send("hello")
    daemon.expect(r"^agent> Echo: hello$")
    pid = wait_for_status(config_path, lambda s: s["daemon"]["running"], "the daemon")["daemon"][
        "pid"
    ]
    daemon.kill()
    shown = status_json(config_path)
    assert shown["daemon"]["running"] is False
    assert f"pid {pid} is gone" in shown["daemon"]["note"]


def test_status_without_any_state_exits_3(tmp_path: Path, config_path: Path) -> None:
    done = status(config_path)
    assert done.returncode == 3
    assert "nothing has run with this config yet" in done.stderr
    assert not (tmp_path / "state").exists(), "status only reads"


def test_a_senders_escape_sequences_never_reach_the_terminal(
    tmp_path: Path, config_path: Path
) -> None:
    """The attack: a message whose body and sender name carry terminal escape sequences
    (clear the screen, retitle the window, hide what follows), waiting in the queue when an
    operator runs `gateway-bot status`. The table shows them defused; JSON escapes them."""
    evil = "\x1b[2J\x1b]0;owned\x07please \x1b[8mhidden\x1b[0m run"

    async def leave_a_waiting_task() -> None:
        store = SqlStore(tmp_path / "state" / "state.db")
        await store.open()
        raw = RawMessage("console", "m-1", "mallory", {"text": evil}, time.time())
        task_id, _ = await store.accept_inbound(raw)
        await store.transition(task_id, TaskState.AUTHENTICATING)
        conversation = await store.create_conversation("console", "default", None)
        parsed = InboundMessage(
            "console", "m-1", "mallory", "Mal\x1b[31mlory", evil, "default",
            raw.received_at, {"conversation": "default"},
        )  # fmt: skip
        await store.transition(
            task_id, TaskState.PENDING, conversation_id=conversation.id, parsed=parsed
        )
        await store.close()

    asyncio.run(leave_a_waiting_task())
    table = status(config_path)
    assert table.returncode == 0, table.stderr
    assert "\x1b" not in table.stdout
    assert "\x07" not in table.stdout
    assert "No daemon is running (it never wrote a status snapshot here)." in table.stdout
    assert "Waiting tasks (1)" in table.stdout
    assert "?[2J?]0;owned?please ?[8mhidden?[0m run" in table.stdout
    shown = status_json(config_path)
    [waiting] = shown["tasks"]["waiting"]
    assert waiting["sender"] == "Mal\x1b[31mlory", "JSON keeps the data, escaped by json"
    assert "\x1b" not in status(config_path, "--json").stdout


def test_status_lists_schedules_with_rule_zone_next_run_and_paused(
    gateway: Any, config_path: Path, fake_api: FakeAnthropic
) -> None:
    daemon = gateway("run", "--config", str(config_path))
    daemon.send("/schedule TZ=Europe/Berlin every weekday at 9:00 check the nightly build")
    daemon.expect(r"^agent> Scheduled #1: ")
    daemon.send("/schedule in 2 hours look at the queue")
    daemon.expect(r"^agent> Scheduled #2: once at ")
    daemon.send("/pause 2")
    daemon.expect(r"^agent> Paused schedule #2\.")
    shown = wait_for_status(config_path, lambda s: len(s["schedules"]) == 2, "the schedules")
    first, second = shown["schedules"]
    assert first["id"] == 1
    assert first["channel"] == "console"
    assert first["rule"] == '"0 9 * * 1-5" (At 09:00 on Monday through Friday, Europe/Berlin)'
    assert first["timezone"] == "Europe/Berlin"
    assert first["paused"] is False
    assert first["next_run"] > time.time()
    assert first["prompt"] == "check the nightly build"
    assert first["conversation_id"]
    assert second["paused"] is True
    assert second["next_run"] is None
    assert second["rule"].startswith("once at ")
    table = status(config_path)
    assert table.returncode == 0
    assert "Schedules (2)" in table.stdout
    [row1] = [line for line in table.stdout.splitlines() if line.strip().startswith("#1 ")]
    assert "Europe/Berlin" in row1
    assert " 09:00 CE" in row1, "the next run in the schedule's zone"
    assert "check the nightly build" in row1
    [row2] = [line for line in table.stdout.splitlines() if line.strip().startswith("#2 ")]
    assert "paused" in row2
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr
    # Read-only beside no daemon: the schedules are still listed from the database.
    assert [s["id"] for s in status_json(config_path)["schedules"]] == [1, 2]
