"""A task's timeline: its state changes from the store, and what the agent did from the
conversation's event log (``events.jsonl``, ``agents/event_log.py``).

The log is read no-follow, relative to the conversation directory's descriptor: it lives
beside the workspace, not in it, but host code never follows a link in a conversation's
tree. Only its last ``MAX_LOG_BYTES`` are read (the log may hold 50 MB).

Which run belongs to which task: a line ``{"type": "gateway_bot_task", "task_id": ...}``
starts a task's runs when the writer puts one there (``RUN_MARKER``); without markers, the
log's runs (blank-line separated) are matched to the conversation's started tasks in start
order, but only when the counts agree (a retried session or a killed run adds or merges
runs, and a guess would show one task's commands under another).
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import json
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from gateway_bot.agents.base import (
    AgentEvent,
    InitEvent,
    NoticeEvent,
    ResultEvent,
    TextEvent,
    ToolResultEvent,
    ToolUseEvent,
)
from gateway_bot.agents.event_log import READY_MARKER, TIME_MARKER
from gateway_bot.domain.display import span
from gateway_bot.domain.lifecycle import TaskKind
from gateway_bot.domain.records import TaskRecord
from gateway_bot.state.store import Store

MAX_LOG_BYTES = 8 * 1024 * 1024
MAX_AGENT_ENTRIES = 200
"""Per task, the newest this many agent entries are kept (a long run has thousands)."""
RUN_MARKER = "gateway_bot_task"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

ParseLine = Callable[[str], Sequence[AgentEvent]]


@dataclass(frozen=True)
class TimelineEntry:
    at: float | None
    """Seconds since the epoch: for an agent event, when the host received its line (the
    log's time markers); None when nothing says (a log written before they were)."""
    source: str
    """"task" (a state change the store recorded) or "agent" (from the event log)."""
    text: str
    code: str | None = None
    """The code of a decision this step waits for (a page puts its buttons here)."""
    duration: float | None = None
    """Seconds until the next step with a time (``with_durations``); None for the last."""

    @property
    def duration_text(self) -> str:
        """Tenths of a second below ten seconds (a tool call or a model turn is often
        shorter than one), then ``span``'s two units; "" without a duration."""
        if self.duration is None:
            return ""
        return f"{self.duration:.1f}s" if self.duration < 10 else span(self.duration)


@dataclass(frozen=True)
class TaskTimeline:
    task: TaskRecord
    entries: tuple[TimelineEntry, ...]
    note: str = ""
    """Why agent events are missing or partial, when they are."""


def state_entries(task: TaskRecord) -> list[TimelineEntry]:
    """What the store keeps of a task's path: accepted, started, finished (or parked)."""
    entries = [TimelineEntry(task.created_at, "task", f"accepted from {task.channel}")]
    if task.started_at is not None:
        again = f" (attempt {task.attempts})" if task.attempts > 1 else ""
        entries.append(TimelineEntry(task.started_at, "task", f"agent started{again}"))
    if task.delivery_error:
        entries.append(TimelineEntry(None, "task", f"reply not delivered: {task.delivery_error}"))
    if task.completed_at is not None and task.completion_reason is not None:
        text = f"completed: {task.completion_reason.value}"
        if task.error:
            text += f" ({task.error})"
        entries.append(TimelineEntry(task.completed_at, "task", text))
    elif task.completed_at is None:
        entries.append(TimelineEntry(None, "task", f"now {task.state.value}"))
    return entries


def describe_event(event: AgentEvent) -> str:
    if isinstance(event, InitEvent):
        return f"session {event.session_id} ({event.model})"
    if isinstance(event, ToolUseEvent):
        return event.summary  # already "Tool: what it did"
    if isinstance(event, ToolResultEvent):
        return f"{'error' if event.is_error else 'result'}: {event.summary}"
    if isinstance(event, TextEvent):
        return _one_line(event.text)
    if isinstance(event, NoticeEvent):
        return event.text
    if isinstance(event, ResultEvent):
        outcome = "failed" if event.is_error else "finished"
        return f"{outcome} after {event.num_turns} turn(s), ${event.cost_usd:.4f}"
    return type(event).__name__


def _one_line(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def read_log_tail(conversation_root: Path, name: str = "events.jsonl") -> tuple[str, bool]:
    """(text, whole): the log's last MAX_LOG_BYTES, no link followed; ("", True) when there
    is no log. Raises OSError when the directory or the log is a link or not regular."""
    try:
        directory = os.open(conversation_root, _DIR_FLAGS)
    except FileNotFoundError:
        return "", True
    try:
        try:
            handle = os.open(name, _READ_FLAGS, dir_fd=directory)
        except FileNotFoundError:
            return "", True
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise OSError(f"{name} is a link: not read") from exc
            raise
        with os.fdopen(handle, "rb") as log_file:
            info = os.fstat(log_file.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise OSError(f"{name} is not a regular file: not read")
            start = max(0, info.st_size - MAX_LOG_BYTES)
            log_file.seek(start)
            data = log_file.read(MAX_LOG_BYTES)
    finally:
        os.close(directory)
    text = data.decode("utf-8", "replace")
    if start > 0:
        text = text.split("\n", 1)[1] if "\n" in text else ""  # drop the cut first line
    return text, start == 0


@dataclass(frozen=True)
class _Run:
    task_id: str | None
    lines: tuple[str, ...]


def split_runs(text: str) -> list[_Run]:
    """Runs in log order: a blank line ends one; a marker line names the task of the runs
    that follow it (until the next marker)."""
    runs: list[_Run] = []
    current: list[str] = []
    task_id: str | None = None

    def end_run() -> None:
        # A run of nothing but its ready line (a warm process that took no turn, the task
        # then run cold) is no run.
        if current and not (len(current) == 1 and ready_at(current) is not None):
            runs.append(_Run(task_id, tuple(current)))
        current.clear()

    for line in text.split("\n"):
        if not line.strip():
            end_run()
            continue
        marked = _marker(line)
        if marked is not None:
            end_run()
            task_id = marked
            continue
        current.append(line)
    end_run()
    return runs


def _marker(line: str) -> str | None:
    if RUN_MARKER not in line:
        return None
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return None
    if isinstance(data, dict) and data.get("type") == RUN_MARKER:
        return str(data.get("task_id", ""))
    return None


async def task_log_lines(store: Store, task: TaskRecord, root: Path) -> tuple[list[str], str]:
    """The lines of ``task``'s runs in its conversation's event log (under ``root``), and a
    note when they are missing."""
    started = [
        t
        for t in await store.list_tasks(
            conversation_id=task.conversation_id, limit=10_000, kind=TaskKind.AGENT
        )
        if t.started_at is not None
    ]
    started.sort(key=lambda t: t.started_at or 0.0)
    try:
        text, whole = await asyncio.to_thread(read_log_tail, root)
    except OSError as exc:
        return [], f"event log not read: {exc}"
    return agent_lines(task, started, text, whole)


def agent_lines(
    task: TaskRecord, started_tasks: Sequence[TaskRecord], text: str, whole: bool
) -> tuple[list[str], str]:
    """The log lines of ``task``'s runs, and a note when they cannot be told apart.
    ``started_tasks``: the conversation's tasks that reached the agent, in start order."""
    runs = split_runs(text)
    if any(run.task_id is not None for run in runs):
        return [line for run in runs if run.task_id == task.id for line in run.lines], ""
    if task.started_at is None:
        return [], ""
    if not whole:
        return [], "the event log is too long to match its runs to tasks"
    if len(runs) != len(started_tasks):
        return [], "the event log's runs cannot be matched to tasks (a retried or killed run)"
    for run, started in zip(runs, started_tasks, strict=True):
        if started.id == task.id:
            return list(run.lines), ""
    return [], ""


def timed_events(
    lines: Sequence[str], parse_line: ParseLine
) -> list[tuple[float | None, AgentEvent | None]]:
    """The agent's events, each with the time the daemon received its line (the time
    marker before it, ``agents/event_log.py``; None before the first). The lines are what
    the agent's CLI printed (a CLI the agent replaced prints anything): a line that does
    not parse is a None event, never an exception."""
    events: list[tuple[float | None, AgentEvent | None]] = []
    at: float | None = None
    for line in lines:
        if at is None and _dated(line, READY_MARKER) is not None:
            continue  # the daemon's own, before any line of the agent's (``ready_at``)
        if (received := _received_at(line)) is not None:
            at = received
            continue
        try:
            parsed = list(parse_line(line))
        except (ValueError, TypeError, OverflowError, KeyError, AttributeError):
            events.append((at, None))
            continue
        events.extend((at, event) for event in parsed)
    return events


def agent_entries(lines: Sequence[str], parse_line: ParseLine) -> list[TimelineEntry]:
    """The agent's events as timeline entries (``timed_events``): a line that does not
    parse is shown as such, never a page that fails to render."""
    entries = [
        TimelineEntry(
            at,
            "agent",
            describe_event(event) if event else "(an event line that could not be read)",
        )
        for at, event in timed_events(lines, parse_line)
    ]
    return entries[-MAX_AGENT_ENTRIES:]


def ready_at(lines: Sequence[str]) -> float | None:
    """When the sandbox had the run's process up: the daemon's ready line, which comes
    first, before any line of the agent's (each of which follows a time marker, so one the
    agent prints is never first)."""
    return _dated(lines[0], READY_MARKER) if lines else None


def _received_at(line: str) -> float | None:
    """A time marker's instant; None for any other line. A marker the agent printed itself
    is read the same way, but the daemon's own follows it before any line of the agent's,
    so it dates nothing."""
    return _dated(line, TIME_MARKER)


def _dated(line: str, marker: str) -> float | None:
    """The instant of a daemon's line of type ``marker``; None for any other line."""
    if marker not in line:
        return None
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("type") != marker:
        return None
    at = data.get("at")
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not 0 < at < 1e11:
        return None
    return float(at)


def with_durations(entries: Sequence[TimelineEntry]) -> list[TimelineEntry]:
    """Each dated step's duration: until the next dated step (steps come in the order they
    happened; one whose next time is earlier, such as a decision recorded late, gets none)."""
    out = list(entries)
    dated = [n for n, entry in enumerate(out) if entry.at is not None]
    for here, after in itertools.pairwise(dated):
        start, end = out[here].at, out[after].at
        if start is not None and end is not None and end >= start:
            out[here] = replace(out[here], duration=end - start)
    return out
