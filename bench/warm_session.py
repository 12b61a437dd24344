"""A conversation's second turn: warm agent session vs cold ``claude -p --resume``, same run.

    uv run python -m bench.warm_session [--runs 7]

The real ``claude`` CLI against the instant fake model API (tests/support/fake_anthropic.py), in
the host sandbox, through the two agent runners the daemon uses. Each run opens a fresh
conversation for each runner, answers its first turn (not timed), then times the second
turn: runner called -> ``result`` read. Cold pays the CLI's start-up and session reload;
warm writes one line into the process that served the first turn. Runners alternate.

Prints medians and their ratio. Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from tests.support.fake_anthropic import FakeAnthropic

from gateway_bot.agents.base import AgentEvent, AgentRequest, AgentRunner, WarmSettings
from gateway_bot.agents.claude.runner import ClaudeCodeRunner, locate_command
from gateway_bot.agents.claude.warm import WarmClaudeRunner
from gateway_bot.agents.event_log import EventLog
from gateway_bot.sandbox.base import ExecutionContext
from gateway_bot.sandbox.host import HostSandbox


def _context(root: Path, context_id: str) -> ExecutionContext:
    dirs = {n: root / context_id / n for n in ("workspace", "home", "inbox", "outbox", "storage")}
    for path in dirs.values():
        path.mkdir(parents=True)
    return ExecutionContext(
        id=context_id,
        workspace=dirs["workspace"],
        home=dirs["home"],
        inbox=dirs["inbox"],
        outbox=dirs["outbox"],
        storage=dirs["storage"],
    )


async def _ignore(event: AgentEvent) -> None:
    return None


async def _second_turn(
    runner: AgentRunner, sandbox: HostSandbox, context: ExecutionContext, env: dict[str, str]
) -> float:
    log = EventLog(context.home / "events.jsonl")
    first = await runner.run(
        AgentRequest("first", None, None, 120, env), sandbox, context, log, _ignore
    )
    assert first.succeeded, first.error_text()
    request = AgentRequest("second", first.session_id, None, 120, env)
    started = time.perf_counter()
    second = await runner.run(request, sandbox, context, log, _ignore)
    elapsed = time.perf_counter() - started
    assert second.succeeded, second.error_text()
    return elapsed


async def _bench(runs: int, api: FakeAnthropic, root: Path) -> tuple[list[float], list[float]]:
    env = {
        "ANTHROPIC_BASE_URL": api.base_url,
        "ANTHROPIC_API_KEY": "bench-key",
        "CLAUDE_CODE_MAX_RETRIES": "0",
    }
    command = locate_command(["claude"])
    cold_runner = ClaudeCodeRunner(command)
    warm_runner = WarmClaudeRunner(command, WarmSettings(max_sessions=2, idle_s=None))
    sandbox = HostSandbox()
    cold: list[float] = []
    warm: list[float] = []
    try:
        for run in range(runs):
            cold.append(await _second_turn(cold_runner, sandbox, _context(root, f"cold{run}"), env))
            warm.append(await _second_turn(warm_runner, sandbox, _context(root, f"warm{run}"), env))
    finally:
        await warm_runner.close()
    return cold, warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with FakeAnthropic() as api, tempfile.TemporaryDirectory() as tmp:
        cold, warm = asyncio.run(_bench(args.runs, api, Path(tmp)))
    cold_median, warm_median = statistics.median(cold), statistics.median(warm)
    print(f"second turn, cold --resume: median {cold_median * 1000:.0f} ms over {len(cold)}")
    print(f"second turn, warm session:  median {warm_median * 1000:.0f} ms over {len(warm)}")
    print(f"cold / warm: {cold_median / warm_median:.1f}x")


if __name__ == "__main__":
    main()
