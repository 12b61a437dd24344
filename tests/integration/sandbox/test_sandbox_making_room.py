"""Making room under the container cap, with real podman: an idle container the sandbox chose
to stop and that is stopped behind its back before its stop (by another task's stop, by an
operator's `podman stop`) is stopped, not a failure of the task that needed the room; and
conversations starting together past the cap all run.

The moment between the sandbox's choice and its stop is where it ends a warm agent session
kept in the chosen container (``KeptProcesses.end``): the test's kept processes say the
idle container holds one and, asked to end it, stop the container with the podman CLI.
That is the soak's race made exact: there a second task's stop came after the first's."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Mapping

from gateway_bot.config.server import load_server_config
from gateway_bot.runtime.agent_setup import agent_image_files
from gateway_bot.sandbox.base import ExecutionContext
from gateway_bot.sandbox.podman.sandbox import PodmanSandbox
from tests.integration.sandbox.test_sandbox_api_exec import DEADLINE_S, start
from tests.integration.sandbox.test_sandbox_stdin import make_context
from tests.support.sandbox_fixtures import SandboxSetup, podman


class StoppedBehindTheBack:
    """A warm session kept in ``context_id``'s container since long ago; ending it stops
    the container with the podman CLI, as an operator (or another task) would."""

    def __init__(self, context_id: str) -> None:
        self.context_id = context_id
        self.ended: list[str] = []

    def idle_since(self) -> Mapping[str, float]:
        return {self.context_id: 0.0} if not self.ended else {}

    async def end(self, context_id: str) -> None:
        self.ended.append(context_id)
        await asyncio.to_thread(podman, "stop", "-t", "0", f"gwb-{context_id}")


async def ran(podman_sandbox: PodmanSandbox, context: ExecutionContext, word: str) -> str:
    process = await start(podman_sandbox, context, f"echo {word}")
    said = (await process.stdout.read()).decode().strip()
    assert await process.wait() == 0
    return said


def running(sandbox: SandboxSetup) -> set[str]:
    return {c for c, info in sandbox.containers().items() if info["running"]}


def test_an_idle_container_stopped_behind_the_sandboxs_back_does_not_fail_the_next_task(
    sandbox: SandboxSetup,
) -> None:
    run = secrets.token_hex(3)
    idle, needs_room, first, second = (f"{run}-{n}" for n in ("idle", "new", "one", "two"))
    config = load_server_config(sandbox.config(max_live_containers=1))
    podman_sandbox = PodmanSandbox(config.sandbox, config.state_dir, agent_image_files(config))
    root = sandbox.tmp_path / "contexts"
    contexts = {c: make_context(root, c) for c in (idle, needs_room, first, second)}

    async def steps() -> None:
        assert await ran(podman_sandbox, contexts[idle], "before") == "before"
        kept = StoppedBehindTheBack(contexts[idle].id)
        podman_sandbox.kept_processes = kept

        # Past the cap of 1: the idle container is chosen, stopped behind the sandbox's
        # back, then stopped by it: the task that needed the room runs all the same.
        assert await ran(podman_sandbox, contexts[needs_room], "made room") == "made room"
        assert kept.ended == [contexts[idle].id], "the chosen container's kept session was ended"
        assert await asyncio.to_thread(running, sandbox) == {contexts[needs_room].id}

        # Two conversations starting at once past the cap: both run, and room is made once.
        podman_sandbox.kept_processes = None
        said = await asyncio.gather(
            ran(podman_sandbox, contexts[first], "first"),
            ran(podman_sandbox, contexts[second], "second"),
        )
        assert said == ["first", "second"]
        assert contexts[needs_room].id not in await asyncio.to_thread(running, sandbox)

    async def go() -> None:
        try:
            async with asyncio.timeout(DEADLINE_S):
                await steps()
        finally:
            await podman_sandbox.close()

    asyncio.run(go())
