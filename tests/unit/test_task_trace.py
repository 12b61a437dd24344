"""A task as a waterfall (issue 32): each step's start and duration from the host's times,
the slowest marked. Claude Code's own stream-json lines, dated as the event log dates them."""

from __future__ import annotations

import json

from gateway_bot.agents.claude.stream import parse_stream_line
from gateway_bot.agents.event_log import READY_MARKER, TIME_MARKER
from gateway_bot.core.conversations.network_log import parse_network_log
from gateway_bot.core.conversations.timeline import ready_at, timed_events
from gateway_bot.core.conversations.trace import build_trace
from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from gateway_bot.domain.messages import RawMessage
from gateway_bot.domain.records import TaskRecord

T0 = 1_795_654_800.0  # 2026-11-26T01:00:00Z


def _task(received: float = T0, acknowledged: float | None = None) -> TaskRecord:
    return TaskRecord(
        id="t1",
        channel="console",
        message_id="m",
        conversation_id="c1",
        state=TaskState.COMPLETED,
        completion_reason=CompletionReason.SUCCESS,
        raw=RawMessage("console", "m", "owner", {}, received),
        parsed=None,
        reply=None,
        reply_delivered=True,
        created_at=T0,
        started_at=T0 + 1.0,
        completed_at=T0 + 30.0,
        cost_usd=0.01,
        num_turns=2,
        error=None,
        attempts=1,
        acknowledged_at=acknowledged,
    )


def _assistant(*blocks: dict[str, object]) -> dict[str, object]:
    return {"type": "assistant", "message": {"content": list(blocks)}}


BASH = {
    "type": "tool_use",
    "id": "u1",
    "name": "Bash",
    "input": {"command": "make build\nmake test"},
}
RESULT = {"type": "tool_result", "tool_use_id": "u1", "content": "built"}
DONE = {"type": "result", "subtype": "success", "is_error": False, "result": "Built."}
STREAM: list[tuple[float, dict[str, object]]] = [
    (2.0, {"type": "system", "subtype": "init", "session_id": "s1", "model": "m"}),
    (4.5, _assistant({"type": "text", "text": "I will build it."})),
    (4.6, _assistant(BASH)),
    (24.6, {"type": "user", "message": {"content": [RESULT]}}),
    (27.0, _assistant({"type": "text", "text": "Built."})),
    (27.1, {**DONE, "session_id": "s1", "total_cost_usd": 0.01, "num_turns": 2}),
]


def _net(second: int, method: str, url: str, allowed: bool, **more: object) -> bytes:
    """A line of the egress proxy's log, ``second`` past the minute after T0's."""
    when = f"2026-11-26T01:00:{second:02d}.000+00:00" if second >= 0 else "2026-11-26T00:59:00Z"
    line = {"time": when, "method": method, "url": url, "allowed": allowed, **more}
    return json.dumps(line).encode() + b"\n"


def _lines(ready: float | None = None) -> list[str]:
    """The run's lines as the event log holds them: the daemon's ready line first (when
    the sandbox had the CLI's process up), then each of the CLI's lines after its time."""
    lines = [] if ready is None else [json.dumps({"type": READY_MARKER, "at": T0 + ready})]
    for offset, data in STREAM:
        lines.append(json.dumps({"type": TIME_MARKER, "at": T0 + offset}))
        lines.append(json.dumps(data))
    return lines


def test_every_step_has_its_start_and_duration_and_the_slowest_is_marked() -> None:
    network = parse_network_log(
        _net(10, "GET", "https://pypi.org/simple/", True)
        + _net(11, "POST", "https://evil.example/", False, reason="not allowed")
        + _net(-1, "GET", "https://before.example/", True)  # before the run: not its
    )
    # Received 50 ms before its commit, acknowledged 0.2 s after, the container up 0.6 s
    # into the run.
    lines = _lines(ready=1.6)
    task = _task(received=T0 - 0.05, acknowledged=T0 + 0.2)
    events = timed_events(lines, parse_stream_line)
    trace = build_trace(task, events, [], network.requests, now=T0 + 99, ready=ready_at(lines))
    steps = [(s.kind, s.label, round(s.start - T0, 2), round(s.duration, 2)) for s in trace.spans]
    assert steps == [
        ("stored", "received and stored", -0.05, 0.05),
        ("queued", "queued", 0.0, 1.0),
        ("acknowledged", "acknowledgement posted", 0.0, 0.2),
        ("run", "run", 1.0, 29.0),
        ("container", "sandbox ready", 1.0, 0.6),
        ("start", "agent started", 1.6, 0.4),
        ("model", "model call 1", 2.0, 2.6),
        ("tool", "Bash: make build make test", 4.6, 20.0),
        ("network", "GET https://pypi.org/simple/", 10.0, 0.0),
        ("network", "POST https://evil.example/", 11.0, 0.0),
        ("model", "model call 2", 24.6, 2.4),
        ("reply", "reply sent", 27.1, 2.9),
    ], steps
    assert trace.slowest is not None
    assert trace.slowest.label == "Bash: make build make test"
    assert [s.label for s in trace.spans if s.slowest] == ["Bash: make build make test"]
    blocked = next(s for s in trace.spans if s.label.startswith("POST"))
    assert blocked.detail == "blocked (not allowed)"
    assert (trace.start, trace.end) == (T0 - 0.05, T0 + 30.0)
    bash = trace.slowest
    assert (trace.left(bash), trace.width(bash)) == (15.47, 66.56)


def test_a_ready_line_the_agent_prints_dates_nothing() -> None:
    """The agent can print a line shaped like the daemon's ready line, but each of its
    lines follows the daemon's time marker: only a ready line that comes first counts."""
    forged = json.dumps({"type": READY_MARKER, "at": T0 + 1.5})
    lines = [*_lines()[:2], json.dumps({"type": TIME_MARKER, "at": T0 + 3}), forged]
    assert ready_at(lines) is None
    assert ready_at([forged, *lines]) == T0 + 1.5
    trace = build_trace(_task(), timed_events(lines, parse_stream_line), [], (), now=0)
    assert "container" not in [s.kind for s in trace.spans]


def test_a_held_request_lasts_until_its_verdict_and_an_unanswered_tool_until_the_end() -> None:
    network = parse_network_log(
        _net(5, "GET", "https://x.example/", False, held=True)
        + _net(8, "GET", "https://x.example/", True)
    )
    cut = _lines()[:6]  # the Bash call, never answered
    trace = build_trace(_task(), timed_events(cut, parse_stream_line), [], network.requests, now=0)
    held = next(s for s in trace.spans if s.kind == "network")
    assert (held.start - T0, held.duration, held.detail) == (5.0, 3.0, "held, allowed")
    bash = next(s for s in trace.spans if s.kind == "tool")
    assert (round(bash.duration, 2), bash.detail) == (25.4, "no result")


def test_lines_that_do_not_parse_or_carry_no_time_make_no_span() -> None:
    lines = ["not json", json.dumps(STREAM[1][1]), *_lines()[:2], "{broken"]
    trace = build_trace(_task(), timed_events(lines, parse_stream_line), [], (), now=0)
    assert [s.kind for s in trace.spans] == ["stored", "queued", "run", "start"]
