"""The claude CLI (a Bun binary) exits without waiting for whoever reads its stdout: what
did not fit in the pipe when it exited is gone. A daemon busy elsewhere when an agent ends
(six tasks at once on two cores) must still get every line of it, the result included; the
email corpus's 100 kB mail once "failed" with exit code 0 that way (its answer, echoed
twice in the last events, was more than the 64 kB a pipe holds by default)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from gateway_bot.agents.claude.runner import QUIET_ENV, locate_command
from gateway_bot.sandbox.child import spawn_fed
from tests.support.fake_anthropic import FakeAnthropic


def busy_until_gone(pid: int, timeout: float = 120) -> None:
    """Block this thread (the event loop: nothing reads the agent's pipe meanwhile) until
    the process has exited."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return  # exited and reaped
        if state in ("Z", "X"):
            return
        assert time.monotonic() < deadline, "the agent never finished its run"
        time.sleep(0.05)


async def test_an_agent_that_ends_while_the_daemon_is_busy_loses_none_of_its_output(
    fake_api: FakeAnthropic, tmp_path: Path
) -> None:
    # 40 kB, so it fits in the stdin pipe at once: the loop is blocked below. The answer
    # repeats it twice (the answer event, then the result): more than a default pipe holds.
    prompt = "[Message from Alice <alice@example.test> via email]\n\n" + "line\n" * 8000
    argv = [
        *locate_command(["claude"]),
        *("-p", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions"),
    ]
    env = {
        **QUIET_ENV,
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "CLAUDE_CONFIG_DIR": str(tmp_path / ".claude"),
        "ANTHROPIC_BASE_URL": fake_api.base_url,
        "ANTHROPIC_API_KEY": "test-key",
    }
    process = await spawn_fed(argv, env=env, stdin_data=prompt.encode(), cwd=tmp_path)
    assert process.stdin is not None
    await process.stdin.wait_closed()  # all of it in the pipe, and its end (the loop's job)
    busy_until_gone(process.pid)
    assert process.stdout is not None
    output = await process.stdout.read()
    await process.wait()

    lines = output.decode().splitlines()
    assert output.endswith(b"\n"), f"the output was cut off after {len(output)} bytes"
    last = json.loads(lines[-1])
    assert last["type"] == "result", f"the run's last line is no result: {lines[-1][:200]}"
    assert str(last["result"]).startswith("Echo: line\nline\n"), "the agent's whole answer"
