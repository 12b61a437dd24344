"""A task skips asking podman about its container when the daemon learned its state moments
ago (the start-up listing, the last task): the container's init, the very process podman
named, still runs. Written as the attacks on that shortcut: what an agent leaves running
still ends before the next task, also in the first task after a restart; a container
removed or stopped behind the daemon's back is noticed, and the next task still runs."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from gateway_bot.config.server import load_server_config
from gateway_bot.runtime.agent_setup import agent_image_files
from gateway_bot.sandbox.base import ExecutionContext
from gateway_bot.sandbox.podman.sandbox import PodmanSandbox
from tests.integration.sandbox.test_sandbox_api_exec import DEADLINE_S, host_processes
from tests.integration.sandbox.test_sandbox_stdin import make_context
from tests.support.sandbox_fixtures import SandboxSetup, podman

KEEPER = "keeper-4711"
"""``$0`` of the agent's background loop: names it in the host's /proc."""
LEAVE_A_WRITER = (
    f"nohup sh -c 'while :; do date +%s%N >> /workspace/beat; sleep 0.05; done' {KEEPER} "
    ">/dev/null 2>&1 & setsid sh -c 'exec sleep 4711' >/dev/null 2>&1 & echo left"
)


def _sandbox(sandbox: SandboxSetup) -> PodmanSandbox:
    config = load_server_config(sandbox.config())
    return PodmanSandbox(config.sandbox, config.state_dir, agent_image_files(config))


async def _run(podman_sandbox: PodmanSandbox, context: ExecutionContext, script: str) -> str:
    process = await podman_sandbox.start(context, ["sh", "-c", script], {})
    said = (await process.stdout.read()).decode()
    assert await process.wait() == 0, await process.read_stderr()
    return said


def _within_deadline(steps: Callable[[], Awaitable[None]]) -> None:
    async def go() -> None:
        async with asyncio.timeout(DEADLINE_S):
            await steps()

    asyncio.run(go())


def _left_running() -> list[int]:
    return host_processes(b"sh", KEEPER) + host_processes(b"sleep", "4711")


def _beats(workspace: Path) -> int:
    beat = workspace / "beat"
    return len(beat.read_text().splitlines()) if beat.exists() else 0


def test_what_a_task_leaves_running_ends_before_the_next_also_after_a_restart(
    sandbox: SandboxSetup,
) -> None:
    context = make_context(sandbox.tmp_path / "contexts", "known-sweep")
    first, restarted = _sandbox(sandbox), _sandbox(sandbox)

    async def is_known(context_id: str) -> bool:
        return True

    async def steps() -> None:
        try:
            assert await _run(first, context, "echo ready") == "ready\n"
        finally:
            await first.close()
        # A new daemon takes the container over from podman's listing; its tasks take the
        # container for running on what it learned there.
        await restarted.open(is_known)
        try:
            assert restarted._contexts[context.id].known is not None, "learned at start-up"
            for round_ in range(2):  # after the start-up's state, then the last task's
                assert await _run(restarted, context, LEAVE_A_WRITER) == "left\n"
                assert _left_running() == [], f"round {round_}: the loop outlived its task"
                written = _beats(context.workspace)
                assert written > 0, "the loop ran while its task did"
                await asyncio.sleep(0.5)  # it wrote every 50 ms while it lived
                assert _beats(context.workspace) == written, "still writing after its task"
                assert restarted._contexts[context.id].known is not None
        finally:
            await restarted.close()

    _within_deadline(steps)


def test_a_container_removed_or_stopped_behind_the_daemons_back_is_noticed(
    sandbox: SandboxSetup,
) -> None:
    context = make_context(sandbox.tmp_path / "contexts", "known-gone")
    podman_sandbox = _sandbox(sandbox)
    name = f"gwb-{context.id}"

    def container_id() -> str:
        return podman("inspect", "--format", "{{.Id}}", name).stdout.strip()

    async def steps() -> None:
        try:
            await _run(podman_sandbox, context, "echo kept > /workspace/notes")
            before = container_id()
            await asyncio.to_thread(podman, "rm", "-f", "-t", "0", name)
            # The next task runs, in a new container on the same workspace.
            assert await _run(podman_sandbox, context, "cat /workspace/notes") == "kept\n"
            recreated = container_id()
            assert recreated not in ("", before), "a new container"

            await asyncio.to_thread(podman, "stop", "-t", "0", name)
            assert await _run(podman_sandbox, context, "echo again") == "again\n"
            assert container_id() == recreated, "the stopped one started again"
        finally:
            await podman_sandbox.close()

    _within_deadline(steps)
