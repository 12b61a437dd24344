"""Host mode (``sandbox: none``): what the agent starts ends with its task, and /stop says
Stopped. The attacks are commands the agent's Bash tool runs on the host: a foreground
command (the tool gives it its own process group) and a process that starts its own
session (``setsid``), both of which outlived the task when only the agent's process group
was killed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import time
from pathlib import Path
from typing import Any

from tests.integration.slack.test_slack_daemon import (
    ALICE,
    GENERAL,
    MENTION,
    people,
    slack_config,
    start_daemon,
)
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import FakeSlack
from tests.support.synapse_fixtures import (
    SynapseServer,
    bot_edit,
    bot_text,
    matrix_config,
    membership,
)


def sleep_argument() -> str:
    """A ``sleep`` duration no other process on this host has in its command line."""
    return f"4242.{secrets.randbelow(10**9):09d}"


def processes_with(marker: str) -> list[str]:
    """Command lines of live processes that contain ``marker`` (zombies have none)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in argv:
            found.append(f"{name}: {argv}")
    return found


def wait_for_processes(marker: str, count: int, timeout: float = 90) -> None:
    """Wait until the agent's command is running (not a timing assertion: a precondition)."""
    deadline = time.monotonic() + timeout
    while len(processes_with(marker)) < count:
        assert time.monotonic() < deadline, f"the agent never ran its command: {marker}"
        time.sleep(0.1)


def test_stop_ends_the_command_and_what_it_started_in_a_new_session(
    gateway, config_path: Path, fake_api: FakeAnthropic
) -> None:
    marker = sleep_argument()
    chat = gateway("chat", "--config", str(config_path))
    chat.send(f"RUN_BASH setsid -f sleep {marker}1; sleep {marker}2")
    wait_for_processes(f"sleep {marker}1", 1)
    wait_for_processes(f"sleep {marker}2", 1)
    chat.send("/stop")
    chat.expect(r"^agent> Stopping task [0-9a-f]{12}…$")
    chat.expect(r"^agent> Stopped\. The task was cancelled with /stop\.$")
    try:
        assert processes_with(marker) == [], "the agent's commands outlived /stop"
        chat.send("still there?")
        chat.expect(r"^agent> Echo: still there\?$")
        chat.finish()
    finally:
        _kill_leftovers(marker)


def test_a_background_process_the_agent_left_ends_with_the_task(
    gateway, config_path: Path, fake_api: FakeAnthropic
) -> None:
    marker = sleep_argument()
    chat = gateway("chat", "--config", str(config_path))
    chat.send(f"RUN_BASH setsid -f sleep {marker}")
    chat.expect(r"^agent> Echo: RUN_BASH setsid -f sleep ")
    try:
        assert processes_with(marker) == [], "a process the agent started outlived its task"
        chat.finish()
    finally:
        _kill_leftovers(marker)


def test_slack_progress_says_stopped_after_stop(
    gateway: Any,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    fake_slack: FakeSlack,
) -> None:
    people(fake_slack)
    config = slack_config(tmp_path, target_repo, fake_api, fake_slack)
    start_daemon(gateway, config)
    fake_slack.wait_connected(1)
    marker = sleep_argument()
    ts = fake_slack.user_says(ALICE, GENERAL, f"{MENTION} RUN_BASH sleep {marker}")
    try:
        wait_for_processes(f"sleep {marker}", 1)
        fake_slack.user_says(ALICE, GENERAL, "!stop", thread_ts=ts)
        fake_slack.wait_for_reply(GENERAL, ts, "The task was cancelled with /stop")
        ack = fake_slack.wait_until(
            lambda: next(
                (m for m in fake_slack.bot_posts(GENERAL, ts)[:1] if "Stopped" in m["text"]), None
            ),
            what="the acknowledgement closed as Stopped",
        )
        assert "Done" not in ack["text"], ack["text"]
        assert "Bash: sleep" in ack["text"], "the summary keeps the steps taken"
        assert processes_with(marker) == [], "the agent's command outlived !stop"
    finally:
        _kill_leftovers(marker)


async def test_matrix_progress_says_stopped_after_stop(
    gateway: Any,
    meet: Any,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice = await meet("alice")
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id], name="Stop room")
    config = matrix_config(tmp_path, target_repo, fake_api, synapse, bot, [alice.user_id])
    gateway("run", "--config", str(config))
    await alice.wait_for(room, membership(bot.user_id, "join"))
    marker = sleep_argument()
    await alice.say(room, f"RUN_BASH setsid -f sleep {marker}1; sleep {marker}2")
    ack = await alice.wait_for(room, bot_text(bot.user_id, r"^Working on it…$"))
    try:
        await asyncio.to_thread(wait_for_processes, f"sleep {marker}2", 1)
        await alice.say(room, "!stop")
        await alice.wait_for(room, bot_text(bot.user_id, r"cancelled with /stop"))
        await alice.wait_for(room, bot_edit(bot.user_id, ack["event_id"], r"^Stopped · 1 step"))
        assert processes_with(marker) == [], "the agent's commands outlived !stop"
    finally:
        _kill_leftovers(marker)


def _kill_leftovers(marker: str) -> None:
    """A failed test must not leave its sleeps behind for the next one."""
    for line in processes_with(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
