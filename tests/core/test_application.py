"""The application API as a dashboard or the CLI would use it: what is running and waiting,
a task's timeline, stopping a task, deciding an approval, channel health and containers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gateway_bot.agents.claude.stream import parse_stream_line
from gateway_bot.core.application import Application, NotInThisProcess
from gateway_bot.core.live_state import DaemonLiveState
from gateway_bot.core.workspaces.directories import Workspaces
from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from gateway_bot.domain.messages import ChannelHealth, ChannelStatus
from gateway_bot.sandbox.base import SandboxContainer
from gateway_bot.sandbox.host import HostSandbox
from tests.core.conftest import World


class ListedSandbox:
    """The only thing the application asks of a sandbox: its list of containers."""

    def __init__(self, *containers: SandboxContainer) -> None:
        self.containers = list(containers)

    async def list_containers(self) -> list[SandboxContainer]:
        return list(self.containers)


def application(world: World, tmp_path: Path, sandbox: ListedSandbox | None = None) -> Application:
    assert world.service is not None
    live = DaemonLiveState(
        {world.channel.name: world.channel},
        sandbox or ListedSandbox(),  # type: ignore[arg-type]
    )
    return Application(
        world.store,
        live,
        service=world.service,
        conversation_root=lambda conversation_id: tmp_path / "conversations" / conversation_id,
        context_files=lambda conversation_id: HostSandbox().files(
            Workspaces(tmp_path, "unused", None).execution_context(conversation_id)
        ),
        parse_line=parse_stream_line,
    )


async def test_running_and_waiting_tasks_by_state_and_conversation(
    world: World, tmp_path: Path
) -> None:
    app = application(world, tmp_path)
    busy = await world.say("hold:one first", room="a")
    queued = await world.say("second", room="a")
    other = await world.say("elsewhere", room="b")
    await world.until(lambda: world.agent.running, "the first task to run")
    await world.completed(other)

    running = await app.tasks(states=[TaskState.EXECUTING])
    assert [t.id for t in running] == [await world.task_id(busy)]
    waiting = await app.tasks(states=[TaskState.PENDING])
    assert [t.id for t in waiting] == [await world.task_id(queued)]
    room_a = running[0].conversation_id
    assert room_a is not None
    in_a = await app.tasks(conversation_id=room_a)
    assert [t.id for t in in_a] == [await world.task_id(busy), await world.task_id(queued)]
    world.agent.release("one")
    await world.reply(queued)


async def test_conversations_list_the_active_one_after_new(world: World, tmp_path: Path) -> None:
    app = application(world, tmp_path)
    await world.reply(await world.say("hello"))
    await world.reply(await world.say("/new"))
    every = await app.conversations()
    active = await app.conversations(active=True)
    assert len(every) == 2
    assert len(active) == 1
    assert every[0] == active[0], "the newest conversation comes first"
    later = await world.say("hi again")
    await world.reply(later)
    assert (await world.task(later)).conversation_id == active[0].id


async def test_stop_a_running_task_as_stop_does(world: World, tmp_path: Path) -> None:
    app = application(world, tmp_path)
    slow = await world.say("hold:never slow job")
    await world.until(lambda: world.agent.running, "the task to run")
    task_id = await world.task_id(slow)
    outcome = await app.stop_task(task_id)
    assert outcome.stopped, outcome.text
    assert (await world.reply(slow)).text == "Stopped. The task was cancelled with /stop."
    stopped = await world.settled(slow)
    assert stopped.completion_reason is CompletionReason.CANCELLED
    again = await app.stop_task(task_id)
    assert not again.stopped
    assert again.text == f"Task {task_id} is completed, not running."


async def test_an_owner_allows_a_held_message_through_the_api(world: World, tmp_path: Path) -> None:
    app = application(world, tmp_path)
    held = await world.say("hello bot", sender="stranger")
    await world.until(lambda: world.channel.texts("owners", "card"), "the approval card")
    [pending] = await app.pending_approvals()
    assert pending.sender_id == "stranger"

    refused = await app.decide_approval(pending.code, "allow", channel="fake", decider_id="alice")
    assert refused is None, "alice is no owner: her decision is ignored"
    assert [a.code for a in await app.pending_approvals()] == [pending.code]

    line = await app.decide_approval(pending.code, "allow", channel="fake", decider_id="owner")
    assert line is not None
    assert line.startswith("Allowed Stranger")
    assert (await world.reply(held)).text == "Echo: hello bot"
    assert await app.pending_approvals() == []
    updates = world.channel.texts("owners", "card_update")
    assert len(updates) == 1, "the card shows the decision, as after a button press"


async def test_overview_shows_health_containers_tasks_and_approvals(
    world: World, tmp_path: Path
) -> None:
    box = ListedSandbox(SandboxContainer("gwb-abcd1234", "abcd1234", "running"))
    app = application(world, tmp_path, box)
    world.channel.listener.status = ChannelStatus(ChannelHealth.DEGRADED, "retrying in 2 s")
    busy = await world.say("hold:x working")
    await world.until(lambda: world.agent.running, "the task to run")
    await world.say("hi", sender="stranger", room="lobby")
    await world.until(lambda: world.channel.texts("owners", "card"), "the approval card")

    overview = await app.overview()
    assert [(c.name, c.health, c.message) for c in overview.channels] == [
        ("fake", "degraded", "retrying in 2 s")
    ]
    assert [c.name for c in overview.containers] == ["gwb-abcd1234"]
    assert [t.id for t in overview.running] == [await world.task_id(busy)]
    assert [t.state for t in overview.waiting] == [TaskState.AUTHENTICATING], "held for approval"
    assert [a.room for a in overview.pending_approvals] == ["lobby"]
    assert overview.finished == ()
    world.agent.release("x")
    await world.completed(busy)
    [finished] = (await app.overview()).finished
    assert finished.id == await world.task_id(busy)
    assert finished.completion_reason is CompletionReason.SUCCESS


async def test_a_failing_sandbox_list_does_not_hide_the_rest(world: World, tmp_path: Path) -> None:
    class Broken(ListedSandbox):
        async def list_containers(self) -> list[SandboxContainer]:
            raise ConnectionError("podman is not answering")

    app = application(world, tmp_path, Broken())
    overview = await app.overview()
    assert overview.containers == ()
    assert "podman is not answering" in overview.containers_error
    assert [c.health for c in overview.channels] == ["connected"]


def _stream(tool_command: str, result: str) -> list[str]:
    """Claude Code stream-json lines of one run that ran ``tool_command``."""
    return [
        json.dumps({"type": "system", "subtype": "init", "session_id": "s1", "model": "m"}),
        json.dumps(
            {
                "type": "assistant",
                "message": {
                    "content": [
                        {"type": "tool_use", "name": "Bash", "input": {"command": tool_command}}
                    ]
                },
            }
        ),
        json.dumps(
            {
                "type": "result",
                "subtype": "success",
                "is_error": False,
                "result": result,
                "session_id": "s1",
                "total_cost_usd": 0.01,
                "num_turns": 2,
            }
        ),
    ]


async def test_a_tasks_timeline_has_its_states_and_only_its_own_agent_steps(
    world: World, tmp_path: Path
) -> None:
    app = application(world, tmp_path)
    first = await world.say("first job")
    await world.reply(first)
    second = await world.say("second job")
    await world.reply(second)
    await world.completed(second)
    conversation = (await world.task(first)).conversation_id
    assert conversation is not None
    root = tmp_path / "conversations" / conversation
    root.mkdir(parents=True)
    runs = [_stream("make first", "one"), _stream("make second", "two")]
    (root / "events.jsonl").write_text("".join("\n".join(run) + "\n\n" for run in runs))

    timeline = await app.task_timeline(await world.task_id(second))
    texts = [e.text for e in timeline.entries]
    assert texts[0] == "accepted from fake"
    assert texts[1] == "agent started"
    assert "Bash: make second" in texts
    assert "Bash: make first" not in texts
    assert texts[-1] == "completed: success"
    assert texts.index("Bash: make second") < texts.index("completed: success")
    assert timeline.note == ""


async def test_marked_runs_are_matched_by_task_id(world: World, tmp_path: Path) -> None:
    app = application(world, tmp_path)
    first = await world.say("first job")
    await world.completed(first)
    conversation = (await world.task(first)).conversation_id
    assert conversation is not None
    root = tmp_path / "conversations" / conversation
    root.mkdir(parents=True)
    task_id = await world.task_id(first)
    lines = [
        json.dumps({"type": "gateway_bot_task", "task_id": "someoneelse"}),
        *_stream("not mine", "x"),
        "",
        json.dumps({"type": "gateway_bot_task", "task_id": task_id}),
        *_stream("attempt one", "x"),
        "",
        *_stream("attempt two, fresh session", "y"),
        "",
    ]
    (root / "events.jsonl").write_text("\n".join(lines) + "\n")
    texts = [e.text for e in (await app.task_timeline(task_id)).entries]
    assert "Bash: attempt one" in texts
    assert "Bash: attempt two, fresh session" in texts
    assert "Bash: not mine" not in texts


async def test_the_timeline_never_follows_a_planted_event_log_link(
    world: World, tmp_path: Path
) -> None:
    """The attack: events.jsonl replaced by a link to a host file the agent wants read back
    (a key, another conversation's log). The timeline refuses it and shows nothing of it."""
    app = application(world, tmp_path)
    first = await world.say("first job")
    await world.completed(first)
    conversation = (await world.task(first)).conversation_id
    assert conversation is not None
    secret = tmp_path / "secret.jsonl"
    secret.write_text("\n".join(_stream("cat /root/.ssh/id_rsa", "SECRET")) + "\n")
    root = tmp_path / "conversations" / conversation
    root.mkdir(parents=True)
    os.symlink(secret, root / "events.jsonl")

    timeline = await app.task_timeline(await world.task_id(first))
    assert "link" in timeline.note
    assert not any("id_rsa" in e.text or "SECRET" in e.text for e in timeline.entries)
    assert [e.text for e in timeline.entries] == ["accepted from fake", "agent started",
                                                  "completed: success"]  # fmt: skip


async def test_controls_need_the_daemon(world: World, tmp_path: Path) -> None:
    reader = Application(world.store, DaemonLiveState({}, ListedSandbox()))  # type: ignore[arg-type]
    task = await world.say("hello")
    await world.completed(task)
    assert [t.state for t in await reader.tasks()] == [TaskState.COMPLETED]
    with pytest.raises(NotInThisProcess):
        await reader.stop_task(await world.task_id(task))
    with pytest.raises(NotInThisProcess):
        await reader.decide_approval("0" * 12, "allow", channel="fake", decider_id="owner")


async def test_a_network_log_is_read_only_inside_a_conversations_directory(
    world: World, tmp_path: Path
) -> None:
    app = application(world, tmp_path)
    line = json.dumps({"method": "GET", "url": "https://outside.example/", "allowed": True})
    (tmp_path / "network.log").write_text(line + "\n")
    walked = await app.network_log("..")
    assert walked.requests == ()
    assert walked.note == "No such conversation."
    (tmp_path / "conversations" / "abcd1234").mkdir(parents=True)
    (tmp_path / "conversations" / "abcd1234" / "network.log").write_text(line + "\n")
    [request] = (await app.network_log("abcd1234")).requests
    assert (request.method, request.url) == ("GET", "https://outside.example/")
    assert request.allowed is True
