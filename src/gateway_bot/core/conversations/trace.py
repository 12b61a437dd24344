"""A task as a waterfall: every step on one time axis, with its start and duration, the
slowest marked (issue 32). The dashboard's task page draws it and ``/metrics``' step
histogram counts it, from this one function, so the two agree.

Where each time comes from (``docs/operations/task-trace.md``):

- ``stored`` (the channel received it to its commit), ``queued`` (accepted to started),
  ``acknowledged`` (accepted to the acknowledgement posted) and the task's whole ``run``
  (started to completed): the store's own records of the task.
- ``container`` (started to the sandbox having the agent's process up: the container made
  or started, the workspace cloned, the CLI's process begun; the daemon's ready line in the
  event log), ``start`` (from then, or from started, to the agent's first line: the CLI up),
  ``model`` (the
  model's input ready, at the run's start or a tool's result, to its next message) and
  ``tool`` (a tool call to its result, paired in order: the streams carry no ids we keep):
  the times the daemon received the agent's lines (``agents/event_log.py``'s markers),
  never a time the agent printed.
- ``reply`` (the agent's result line to the task's completion: the reply sent and
  recorded): a received time and the store's.
- ``network``: the egress proxy's log of the sandbox's requests during the run (its own
  clock, outside the sandbox); a request held for approval lasts until its verdict, any
  other is an instant (the proxy does not log how long a request took).
- ``approval``: an action approval's record, asked to decided (or to now while pending).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from gateway_bot.agents.base import (
    AgentEvent,
    InitEvent,
    ResultEvent,
    TextEvent,
    ToolResultEvent,
    ToolUseEvent,
)
from gateway_bot.core.conversations.network_log import NetworkRequest
from gateway_bot.core.conversations.timeline import describe_event
from gateway_bot.domain.display import span as two_units
from gateway_bot.domain.records import TaskRecord
from gateway_bot.state.action_approvals_store import PENDING, ActionApprovalRecord

LOG_PRECISION = 0.001
"""The proxy dates its lines to the millisecond: a request of a run shorter than that can
bear a time just outside it."""
KINDS = (
    "stored", "queued", "acknowledged", "container", "start",
    "model", "tool", "network", "approval", "reply", "run",
)  # fmt: skip
"""Every span's kind, in the order a task meets them (``/metrics``' ``step`` label)."""
STORED_WITHIN_S = 3600.0
"""A channel's receipt time older than this before the commit is not shown as the stored
step (a homeserver's timestamp of a message synced late, a clock far off)."""
MAX_SPANS = 500
"""A long run has thousands of steps; the page shows the first this many."""
_LABEL_CHARS = 120


@dataclass(frozen=True)
class Span:
    kind: str
    label: str
    start: float
    """Seconds since the epoch."""
    duration: float
    detail: str = ""
    slowest: bool = False

    @property
    def duration_text(self) -> str:
        return seconds_text(self.duration)


@dataclass(frozen=True)
class Trace:
    task: TaskRecord
    spans: tuple[Span, ...]
    """By start (the enclosing ``run`` before the steps it holds)."""
    start: float
    end: float
    slowest: Span | None
    """The longest step, the enclosing ``run`` aside (it always is the longest)."""
    note: str = ""

    @property
    def length(self) -> float:
        return max(self.end - self.start, 1e-3)

    def offset(self, span: Span) -> float:
        return span.start - self.start

    def offset_text(self, span: Span) -> str:
        """``+1.2s``: when the span started, counted from the task's acceptance."""
        return "+" + seconds_text(max(0.0, self.offset(span)))

    def left(self, span: Span) -> float:
        """Where the span starts, in percent of the axis (for the page's bar)."""
        return round(min(100.0, max(0.0, 100 * self.offset(span) / self.length)), 2)

    def width(self, span: Span) -> float:
        """The span's length in percent; at least a hairline, so an instant shows."""
        room = 100.0 - self.left(span)
        return round(min(room, max(0.3, 100 * span.duration / self.length)), 2)


def build_trace(
    task: TaskRecord,
    events: Sequence[tuple[float | None, AgentEvent | None]],
    approvals: Iterable[ActionApprovalRecord],
    requests: Iterable[NetworkRequest],
    *,
    now: float,
    note: str = "",
    ready: float | None = None,
) -> Trace:
    """``events``: the task's agent events with their received times
    (``timeline.timed_events``); ``requests``: its conversation's network log (only those
    in this task's run are kept). ``now`` ends what has not ended yet. ``ready``: when the
    sandbox had the run's process up (``timeline.ready_at``)."""
    end = task.completed_at if task.completed_at is not None else now
    spans: list[Span] = []
    received = task.raw.received_at
    if 0 <= task.created_at - received <= STORED_WITHIN_S:
        spans.append(_span("stored", "received and stored", received, task.created_at))
    if task.started_at is not None:
        spans.append(_span("queued", "queued", task.created_at, task.started_at))
    if task.acknowledged_at is not None:
        posted = "acknowledgement posted"
        spans.append(_span("acknowledged", posted, task.created_at, task.acknowledged_at))
    if task.started_at is not None:
        spans.append(_span("run", "run", task.started_at, end, task.state.value))
        if ready is not None and task.started_at <= ready <= end:
            spans.append(_span("container", "sandbox ready", task.started_at, ready))
    spans += _agent_spans(task, events, end, ready)
    spans += _approval_spans(approvals, now)
    if task.started_at is not None:
        spans += _network_spans(requests, task.started_at, end)
    spans.sort(key=lambda s: (s.start, KINDS.index(s.kind) if s.kind == "run" else 99))
    spans = spans[:MAX_SPANS]
    steps = [s for s in spans if s.kind != "run"]
    slowest = max(steps, key=lambda s: s.duration) if steps else None
    if slowest is not None and slowest.duration > 0:
        marked = replace(slowest, slowest=True)
        spans = [marked if s is slowest else s for s in spans]
        slowest = marked
    else:
        slowest = None
    last = max([end, *(s.start + s.duration for s in spans)])
    first = min([task.created_at, *(s.start for s in spans)])
    return Trace(task, tuple(spans), first, last, slowest, note)


def _agent_spans(
    task: TaskRecord,
    events: Sequence[tuple[float | None, AgentEvent | None]],
    end: float,
    process_up: float | None,
) -> list[Span]:
    """Model calls and tool calls from the stream's order and received times."""
    spans: list[Span] = []
    ready: float | None = task.started_at  # when the model last had new input
    model: int | None = None  # the model call whose message is still arriving
    calls: deque[tuple[float, ToolUseEvent]] = deque()
    for at, event in events:
        if at is None or event is None:
            continue
        if not spans and task.started_at is not None:
            up = process_up
            since = up if up is not None and task.started_at <= up <= at else None
            spans.append(_span("start", "agent started", since or task.started_at, at))
        if isinstance(event, InitEvent):
            ready = at
        elif isinstance(event, (TextEvent, ToolUseEvent)):
            if ready is not None:
                label = f"model call {sum(1 for s in spans if s.kind == 'model') + 1}"
                model = len(spans)
                spans.append(_span("model", label, ready, at))
                ready = None
            if model is not None:  # a message's later lines extend its call
                call, what = spans[model], _cut(describe_event(event))
                spans[model] = _span("model", call.label, call.start, at, what)
            if isinstance(event, ToolUseEvent):
                calls.append((at, event))
        elif isinstance(event, ToolResultEvent):
            if calls:
                started, call_event = calls.popleft()
                spans.append(_span("tool", _cut(call_event.summary), started, at, _result(event)))
            ready, model = at, None
        elif isinstance(event, ResultEvent):
            spans.append(_span("reply", "reply sent", at, end, describe_event(event)))
            ready, model = None, None
    for started, call_event in calls:  # never answered: until the run ended
        spans.append(_span("tool", _cut(call_event.summary), started, end, "no result"))
    return spans


def _approval_spans(approvals: Iterable[ActionApprovalRecord], now: float) -> list[Span]:
    spans = []
    for record in approvals:
        asked = "question" if record.kind == "question" else "approval"
        ended = record.decided_at if record.decided_at is not None else now
        verdict = "waiting" if record.state == PENDING else record.state
        who = f" by {record.decided_by}" if record.decided_by else ""
        label = _cut(f"{asked}: {record.summary}")
        spans.append(_span("approval", label, record.created_at, ended, f"{verdict}{who}"))
    return spans


def _network_spans(requests: Iterable[NetworkRequest], start: float, end: float) -> list[Span]:
    """The run's requests; a held one lasts until the line that decides it."""
    spans: list[Span] = []
    held: dict[tuple[str, str], int] = {}
    for request in requests:
        at = request.at
        if (
            at is None
            or request.allowed is None
            or not start - LOG_PRECISION <= at <= end + LOG_PRECISION
        ):
            continue
        key = (request.method, request.url)
        label = _cut(f"{request.method} {request.url}")
        if request.held:
            held[key] = len(spans)
            spans.append(_span("network", label, at, end, "held, no verdict"))
            continue
        verdict = "allowed" if request.allowed else "blocked"
        why = f" ({request.reason})" if request.reason else ""
        if key in held:
            where = held.pop(key)
            spans[where] = _span("network", label, spans[where].start, at, f"held, {verdict}{why}")
        else:
            spans.append(_span("network", label, at, at, f"{verdict}{why}"))
    return spans


def seconds_text(seconds: float) -> str:
    """As the timeline writes a step's duration: tenths below ten seconds (a model turn or
    a tool call is often shorter than one), then two units (``display.span``)."""
    return f"{seconds:.1f}s" if seconds < 10 else two_units(seconds)


def _span(kind: str, label: str, start: float, end: float, detail: str = "") -> Span:
    return Span(kind, label, start, max(0.0, end - start), detail)


def _result(event: ToolResultEvent) -> str:
    return _cut(f"{'error' if event.is_error else 'result'}: {event.summary}")


def _cut(text: str, limit: int = _LABEL_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
