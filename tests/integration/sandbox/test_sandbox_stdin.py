"""A sandbox process whose stdin stays open: what a warm agent session needs to write one turn
after another into the same process. Proved in a real podman container and on the host: two
lines written at different times get two answers, each before the next line is written, and
closing stdin ends the process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway_bot.config.server import load_server_config
from gateway_bot.runtime.agent_setup import agent_image_files
from gateway_bot.sandbox.base import ExecutionContext, Sandbox
from gateway_bot.sandbox.host import HostSandbox
from gateway_bot.sandbox.podman.sandbox import PodmanSandbox
from tests.support.sandbox_fixtures import SandboxSetup

ANSWER_EACH_LINE = 'while read -r line; do echo "got $line"; done; echo "input ended"'
DEADLINE_S = 180
"""A guard so a broken pipe fails the test instead of hanging it, not a speed check."""


def make_context(root: Path, context_id: str) -> ExecutionContext:
    dirs = {name: root / context_id / name for name in ("workspace", "home", "inbox", "outbox")}
    dirs["storage"] = root / context_id / "storage"
    for path in dirs.values():
        path.mkdir(parents=True)
    return ExecutionContext(id=context_id, **dirs)


async def converse(sandbox: Sandbox, context: ExecutionContext) -> tuple[list[str], int]:
    """Two turns into one process, then end of input. Returns what it said and its exit."""
    process = await sandbox.start(context, ["sh", "-c", ANSWER_EACH_LINE], {}, keep_stdin=True)
    said = []
    try:
        async with asyncio.timeout(DEADLINE_S):
            for turn in (b"first turn\n", b"second turn\n"):
                await process.write(turn)
                # The answer comes while stdin is still open: the process is not waiting
                # for end of file, and the next line is written only after it.
                said.append((await process.stdout.readline()).decode().strip())
            process.close_stdin()
            said += (await process.stdout.read()).decode().splitlines()
            code = await process.wait()
    finally:
        process.kill()
    with pytest.raises(ConnectionError):
        await process.write(b"too late\n")
    return said, code


def test_a_podman_process_answers_turn_by_turn_until_its_stdin_closes(
    sandbox: SandboxSetup,
) -> None:
    config = load_server_config(sandbox.config())
    podman = PodmanSandbox(config.sandbox, config.state_dir, agent_image_files(config))
    context = make_context(sandbox.tmp_path / "contexts", "stdin-open")

    async def go() -> tuple[list[str], int]:
        try:
            return await converse(podman, context)
        finally:
            await podman.close()

    said, code = asyncio.run(go())
    assert said == ["got first turn", "got second turn", "input ended"]
    assert code == 0
    assert sandbox.containers()["stdin-open"]["running"], "the container outlives the process"


def test_a_host_process_answers_turn_by_turn_until_its_stdin_closes(tmp_path: Path) -> None:
    said, code = asyncio.run(converse(HostSandbox(), make_context(tmp_path, "stdin-open")))
    assert said == ["got first turn", "got second turn", "input ended"]
    assert code == 0


def test_without_keep_stdin_the_prompt_is_all_the_input(tmp_path: Path) -> None:
    """The default stays as the agent runner relies on: stdin_data, then end of file."""

    async def go() -> tuple[str, int]:
        sandbox = HostSandbox()
        context = make_context(tmp_path, "stdin-fed")
        process = await sandbox.start(context, ["cat"], {}, stdin_data=b"the whole prompt")
        async with asyncio.timeout(DEADLINE_S):
            out = (await process.stdout.read()).decode()
            code = await process.wait()
        with pytest.raises(ConnectionError):
            await process.write(b"more")
        return out, code

    assert asyncio.run(go()) == ("the whole prompt", 0)
