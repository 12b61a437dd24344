"""500 warm agent sessions opened and ended every way one can end: the runner gives back every
file descriptor, child process and asyncio task it took (a peer's gateway hung after three
days from leaked warm-session descriptors).

The warm runner and the host sandbox are the daemon's own, in this process so that its
descriptors and tasks can be counted; the agent is a small shell script speaking Claude
Code's stream-json (one ``result`` per input line), not the real CLI, whose ~1 s start-up
would make 500 sessions take most of an hour. Each session ends one of four ways: evicted
as least recently used, ended by the sandbox's idle stop (``end``), cancelled mid-turn
(``/stop``), or its process killed from outside (the next turn then starts a new one)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from gateway_bot.agents.base import AgentEvent, AgentRequest, InitEvent, WarmSettings
from gateway_bot.agents.claude.warm import WarmClaudeRunner
from gateway_bot.agents.event_log import EventLog
from gateway_bot.sandbox.host import HostSandbox
from tests.conftest import _descendants
from tests.integration.agents.test_warm_sessions import make_context

pytestmark = pytest.mark.slow

SESSIONS = 500

FAKE_AGENT = r"""#!/bin/sh
# Claude Code's stream-json, minimally: an init and a result for every line read (the
# last one may lack its newline: a cold run's prompt). The session id carries this
# shell's host pid (/proc is the host's), so a test can kill it.
read -r pid rest < /proc/self/stat
session="warm-$pid"
turn=0
while IFS= read -r line || [ -n "$line" ]; do
  turn=$((turn + 1))
  echo "{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"$session\",\"model\":\"fake\"}"
  case "$line" in *HANG*) sleep 1000 ;; esac
  echo "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\
\"result\":\"turn $turn\",\"session_id\":\"$session\",\"num_turns\":1}"
done
"""


Held = tuple[set[tuple[int, str]], set[int], set[asyncio.Task[Any]]]


def held() -> Held:
    """This process's open descriptors (with what each points at), its child processes and
    its asyncio tasks. Compared as sets: what an earlier test of this worker left ending (a
    child process, a descriptor) may end meanwhile, which a count mistakes for a leak hidden."""
    descriptors = set()
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            descriptors.add((int(name), os.readlink(f"/proc/self/fd/{name}")))
    return descriptors, set(_descendants(os.getpid())), set(asyncio.all_tasks())


def test_five_hundred_warm_sessions_leave_no_descriptor_process_or_task_behind(
    tmp_path: Path,
) -> None:
    agent = tmp_path / "fake-agent"
    agent.write_text(FAKE_AGENT)
    agent.chmod(0o755)
    runner = WarmClaudeRunner([str(agent)], WarmSettings(max_sessions=4, idle_s=None))
    sandbox = HostSandbox()
    ways = {"evicted": 0, "idle stop": 0, "stop": 0, "killed": 0}

    async def turn(context_id: str, prompt: str, session: str | None) -> str:
        context = contexts[context_id]
        outcome = await runner.run(
            AgentRequest(prompt, session, None, 60),
            sandbox,
            context,
            EventLog(context.home / "events.jsonl"),
            ignore,
        )
        assert outcome.succeeded, outcome.error_text()
        assert outcome.result is not None
        assert outcome.session_id is not None
        return outcome.session_id

    async def ignore(event: AgentEvent) -> None:
        return None

    async def stopped_mid_turn(context_id: str, session: str) -> None:
        started = asyncio.Event()

        async def on_event(event: AgentEvent) -> None:
            if isinstance(event, InitEvent):
                started.set()

        context = contexts[context_id]
        request = AgentRequest("HANG", session, None, 60)
        log = EventLog(context.home / "events.jsonl")
        run = asyncio.create_task(runner.run(request, sandbox, context, log, on_event))
        await asyncio.wait_for(started.wait(), 60)
        run.cancel()  # what /stop does to the task
        await asyncio.gather(run, return_exceptions=True)

    async def one_session(number: int) -> None:
        context_id = f"c{number}"
        session = await turn(context_id, "first", None)
        assert await turn(context_id, "second", session) == session, "the same process"
        way = list(ways)[number % 4]
        ways[way] += 1
        if way == "idle stop":
            await runner.end(context_id)
        elif way == "stop":
            await stopped_mid_turn(context_id, session)
        elif way == "killed":
            os.kill(int(session.removeprefix("warm-")), signal.SIGKILL)
            # Answered by a new warm process, or cold if the death is not seen yet.
            await turn(context_id, "after the kill", session)
            await runner.end(context_id)
        # "evicted": left alone; later sessions push it out of the cap

    async def go() -> tuple[Held, Held]:
        before = held()
        for number in range(SESSIONS):
            await one_session(number)
            assert runner.live_sessions <= 4
        await runner.close()
        await asyncio.sleep(0)  # let finished tasks' callbacks run
        return before, held()

    contexts = {f"c{n}": make_context(tmp_path / "contexts", f"c{n}") for n in range(SESSIONS)}
    before, after = asyncio.run(go())
    assert ways == {"evicted": 125, "idle stop": 125, "stop": 125, "killed": 125}
    # The listing's own descriptor differs between the two reads: only what points elsewhere.
    new_descriptors = {
        (fd, target) for fd, target in after[0] - before[0] if "/proc/" not in target
    }
    assert new_descriptors == set(), "descriptors left open"
    assert after[1] - before[1] == set(), "child processes left running"
    assert after[2] - before[2] == set(), "asyncio tasks left behind"
