"""A sandbox that could not get ready once for a reason nobody foresaw (the soak's podman
answer its client could not read) costs the person nothing: nothing of the task ran, so it
is tried again and they get their answer, not "Internal error". Only a sandbox that keeps
failing is shown, with the sandbox's own words.

The real executor and service over the memory sandbox (``tests/core/test_context_files.py``);
the agent's start fails as a sandbox's ``start`` does before it runs anything."""

from __future__ import annotations

from pathlib import Path

from gateway_bot.agents.base import AgentOutcome, AgentRequest, OnEvent
from gateway_bot.agents.event_log import EventLog
from gateway_bot.sandbox.base import ExecutionContext, SandboxPreparationFailed
from tests.core.memory_sandbox import AgentInside
from tests.core.test_context_files import FilesWorld

SOAK_ERROR = "preparing gwb-1234abcd failed: JSONDecodeError: Expecting value: line 1 column 1"


class StartFails(AgentInside):
    """The sandbox's start fails ``times`` times before the agent runs."""

    def __init__(self, times: int) -> None:
        super().__init__()
        self.failures_left = times

    async def run(
        self,
        request: AgentRequest,
        sandbox: object,
        context: ExecutionContext,
        event_log: EventLog,
        on_event: OnEvent,
    ) -> AgentOutcome:
        if self.failures_left:
            self.failures_left -= 1
            raise SandboxPreparationFailed(SOAK_ERROR)
        return await super().run(request, sandbox, context, event_log, on_event)


async def started(tmp_path: Path, failures: int) -> FilesWorld:
    world = FilesWorld(tmp_path, StartFails(failures))
    await world.start()
    return world


async def test_a_sandbox_that_failed_to_get_ready_once_is_tried_again(tmp_path: Path) -> None:
    world = await started(tmp_path, 1)
    try:
        reply = await world.reply(await world.say("write:notes.txt=kept"))
    finally:
        await world.close()
    assert reply.text == "done", reply.text


async def test_a_sandbox_that_keeps_failing_is_shown_in_its_own_words(tmp_path: Path) -> None:
    world = await started(tmp_path, 3)
    try:
        reply = await world.reply(await world.say("write:notes.txt=never"))
    finally:
        await world.close()
    assert reply.text.startswith("The sandbox could not run this task: preparing gwb-"), reply.text
    assert "Internal error" not in reply.text
