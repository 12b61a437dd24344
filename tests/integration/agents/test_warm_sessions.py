"""Warm agent sessions: a conversation's later turns go to the ``claude`` process that served
its first, and anything that ends that process (``/stop``, a kill from the host, the cap on
live sessions) costs only start-up: the next message is answered with its history.

The real CLI against the scripted fake API, in host mode (the process is then a host
process a test can find by its working directory and kill)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import yaml

from gateway_bot.agents.base import AgentEvent, AgentRequest, WarmSettings
from gateway_bot.agents.claude.runner import locate_command
from gateway_bot.agents.claude.warm import WarmClaudeRunner
from gateway_bot.agents.event_log import EventLog
from gateway_bot.sandbox.base import ExecutionContext
from gateway_bot.sandbox.host import HostSandbox
from tests.conftest import _alive, live_processes
from tests.integration.sandbox.test_host_stop import _kill_leftovers, processes_with, sleep_argument
from tests.support.fake_anthropic import FakeAnthropic

WARM_FLAG = "--input-format stream-json"


def with_warm_sessions(config: Path, count: int = 4) -> Path:
    """The config with ``count`` warm sessions (4 is also the default: said out loud here, as
    these tests are about them)."""
    data = yaml.safe_load(config.read_text())
    data["agent"]["max_warm_sessions"] = count
    config.write_text(yaml.safe_dump(data))
    return config


def warm_agents(under: Path) -> set[int]:
    """The warm ``claude`` processes working in a directory below ``under``."""

    def select(pid: int, argv: str) -> bool:
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            return False
        program = argv.split()[0].rsplit("/", 1)[-1]  # not the sandbox's unshare around it
        return program == "claude" and WARM_FLAG in argv and cwd.startswith(str(under) + "/")

    return set(live_processes(select))


def wait_until_gone(pid: int) -> None:
    """A guard against a hang, not a speed check."""
    deadline = time.monotonic() + 60
    while _alive(pid):
        assert time.monotonic() < deadline, f"process {pid} did not end"
        time.sleep(0.1)


def history_of_last_request(fake_api: FakeAnthropic) -> str:
    return " ".join(fake_api.user_texts(fake_api.requests[-1]))


def test_two_turns_are_served_by_one_agent_process(
    gateway, config_path: Path, tmp_path: Path, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(with_warm_sessions(config_path)))
    chat.send("the first question")
    chat.expect(r"^agent> Echo: the first question$")
    first = warm_agents(tmp_path)
    assert len(first) == 1, "the first turn leaves its agent process running"
    chat.send("the second question")
    chat.expect(r"^agent> Echo: the second question$")
    assert warm_agents(tmp_path) == first, "the second turn went to the same process"
    assert "the first question" in history_of_last_request(fake_api)
    chat.finish()
    assert warm_agents(tmp_path) == set(), "the warm process ends with the daemon"
    assert chat.count(r"^error> ") == 0


def test_a_warm_process_killed_from_the_host_costs_only_a_cold_start(
    gateway, config_path: Path, tmp_path: Path, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(with_warm_sessions(config_path)))
    chat.send("remember the word kumquat")
    chat.expect(r"^agent> Echo: remember the word kumquat$")
    (pid,) = warm_agents(tmp_path)
    os.kill(pid, signal.SIGKILL)
    wait_until_gone(pid)
    chat.send("what was the word?")
    chat.expect(r"^agent> Echo: what was the word\?$")
    assert "remember the word kumquat" in history_of_last_request(fake_api)
    chat.send("and once more")
    chat.expect(r"^agent> Echo: and once more$")
    chat.finish()
    assert chat.count(r"^error> ") == 0


def test_stop_mid_turn_ends_the_warm_process_and_the_next_message_resumes(
    gateway, config_path: Path, tmp_path: Path, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(with_warm_sessions(config_path)))
    chat.send("remember the word kumquat")
    chat.expect(r"^agent> Echo: remember the word kumquat$")
    (pid,) = warm_agents(tmp_path)
    fake_api.hold("SLOW JOB")
    chat.send("SLOW JOB please")
    assert fake_api.wait_for_held(60), "the agent never asked the model"
    chat.send("/stop")
    chat.expect(r"^agent> Stopped\. The task was cancelled with /stop\.$")
    fake_api.release()
    wait_until_gone(pid)
    chat.send("what was the word?")
    chat.expect(r"^agent> Echo: what was the word\?$")
    assert "remember the word kumquat" in history_of_last_request(fake_api)
    chat.finish()
    assert chat.count(r"Echo: SLOW JOB") == 0


def make_context(root: Path, context_id: str) -> ExecutionContext:
    dirs = {name: root / context_id / name for name in ("workspace", "home", "inbox", "outbox")}
    dirs["storage"] = root / context_id / "storage"
    for path in dirs.values():
        path.mkdir(parents=True)
    return ExecutionContext(id=context_id, **dirs)


def test_the_cap_ends_the_least_recently_used_warm_process(
    tmp_path: Path, fake_api: FakeAnthropic
) -> None:
    env = {
        "ANTHROPIC_BASE_URL": fake_api.base_url,
        "ANTHROPIC_API_KEY": "test-key",
        "CLAUDE_CODE_MAX_RETRIES": "0",
    }
    runner = WarmClaudeRunner(locate_command(["claude"]), WarmSettings(2, idle_s=3600))
    sandbox = HostSandbox()
    contexts = {name: make_context(tmp_path, name) for name in ("alpha", "beta", "gamma")}
    replies: dict[str, str] = {}

    async def turn(name: str, prompt: str, session: str | None) -> str | None:
        async def on_event(event: AgentEvent) -> None:
            return None

        context = contexts[name]
        log = EventLog(context.home / "events.jsonl")
        request = AgentRequest(prompt, session, None, 120, env)
        outcome = await runner.run(request, sandbox, context, log, on_event)
        assert outcome.succeeded, outcome.error_text()
        assert outcome.result is not None
        replies[name] = outcome.result.text
        return outcome.session_id

    def running() -> set[str]:
        return {name for name in contexts if warm_agents(tmp_path / name)}

    async def go() -> None:
        try:
            alpha = await turn("alpha", "alpha one", None)
            await turn("beta", "beta one", None)
            assert running() == {"alpha", "beta"}
            await turn("alpha", "alpha two", alpha)  # alpha is now the most recently used
            await turn("gamma", "gamma one", None)
            assert running() == {"alpha", "gamma"}, "beta, least recently used, was ended"
            assert runner.processes_started == 3, "alpha's second turn reused its process"
        finally:
            await runner.close()
        assert running() == set()

    asyncio.run(go())
    assert replies == {
        "alpha": "Echo: alpha two",
        "beta": "Echo: beta one",
        "gamma": "Echo: gamma one",
    }


def test_what_the_agent_leaves_running_ends_after_each_turn_while_its_warm_process_stays(
    gateway, config_path: Path, tmp_path: Path, fake_api: FakeAnthropic
) -> None:
    marker = sleep_argument()
    listener = (
        "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen();"
        " time.sleep(10**6)"
    )
    chat = gateway("chat", "--config", str(with_warm_sessions(config_path)))
    try:
        chat.send(
            f"RUN_BASH setsid -f sleep {marker}1; (sleep {marker}2 >/dev/null 2>&1 &);"
            f' setsid -f python3 -c "{listener}" {marker}3 >/dev/null 2>&1; echo started'
        )
        chat.expect(r"^agent> Echo: RUN_BASH setsid -f sleep ")
        assert processes_with(marker) == [], "what the agent started outlived its turn"
        first = warm_agents(tmp_path)
        assert len(first) == 1, "the warm process itself was kept"
        chat.send("the second question")
        chat.expect(r"^agent> Echo: the second question$")
        assert warm_agents(tmp_path) == first, "the second turn went to the same process"
        chat.finish()
    finally:
        _kill_leftovers(marker)
