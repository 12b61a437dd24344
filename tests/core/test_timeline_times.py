"""Every step of a task's timeline has its time and how long it took (issue 30, item 9):
the daemon dates each line of the agent's stream as it receives it, and the timeline reads
those times, never a time the agent printed. Real EventLog, real store and service, the
fast tier's agent; the stream lines are Claude Code's."""

from __future__ import annotations

import json
from pathlib import Path

from gateway_bot.agents.event_log import TIME_MARKER, EventLog
from tests.core.conftest import World
from tests.core.test_application import _stream, application


def _dated(lines: list[str], first: float, step: float) -> list[str]:
    """``lines`` as the daemon writes them: each after its time marker, ``step`` apart."""
    out = []
    for n, line in enumerate(lines):
        out.append(json.dumps({"type": TIME_MARKER, "at": first + n * step}))
        out.append(line)
    return out


async def test_the_event_log_dates_every_line_it_keeps(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    await log.append('{"type": "assistant"}')
    await log.append('{"type": "result"}')
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["type"] for line in lines] == [
        TIME_MARKER, "assistant", TIME_MARKER, "result",
    ]  # fmt: skip
    assert json.loads(lines[0])["at"] <= json.loads(lines[2])["at"]


async def test_each_agent_step_has_its_time_and_duration_and_a_forged_time_dates_nothing(
    world: World, tmp_path: Path
) -> None:
    app = application(world, tmp_path)
    job = await world.say("run the build")
    await world.reply(job)
    await world.completed(job)
    task = await world.task(job)
    assert task.conversation_id is not None
    assert task.started_at is not None
    assert task.completed_at is not None
    root = tmp_path / "conversations" / task.conversation_id
    root.mkdir(parents=True)
    stream = _stream("make build", "built")
    # The agent prints a line shaped like the daemon's marker, dating itself in 1970.
    forged = json.dumps({"type": TIME_MARKER, "at": 1.0})
    stream.insert(2, forged)
    step = (task.completed_at - task.started_at) / (len(stream) + 1)  # the run's own span
    dated_lines = _dated(stream, task.started_at + step, step)
    (root / "events.jsonl").write_text("\n".join(dated_lines) + "\n")

    timeline = await app.task_timeline(task.id)
    agent = [entry for entry in timeline.entries if entry.source == "agent"]
    assert agent, timeline
    assert all(entry.at is not None and entry.at >= task.started_at for entry in agent), agent
    bash = next(entry for entry in agent if entry.text == "Bash: make build")
    assert bash.duration is not None
    assert bash.duration > 0
    assert bash.duration_text.endswith("s")
    # Every dated step but the last says how long it took; "accepted" too.
    dated = [entry for entry in timeline.entries if entry.at is not None]
    assert all(entry.duration is not None for entry in dated[:-1]), dated
