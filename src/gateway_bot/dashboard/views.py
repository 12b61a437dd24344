"""What the pages show, shaped from the application API's records: plain rows for the
templates, so templates hold no logic beyond loops and the records' text is escaped there
(autoescape) and nowhere else."""

from __future__ import annotations

import time
from dataclasses import dataclass

from gateway_bot.core.application import Application
from gateway_bot.core.decisions import PendingDecision, waiting_tasks
from gateway_bot.core.live_state import ChannelView
from gateway_bot.core.status.overview import ContainerLine, Period
from gateway_bot.domain.display import one_line, span
from gateway_bot.domain.lifecycle import TaskState
from gateway_bot.domain.records import ConversationRecord, TaskRecord
from gateway_bot.state.task_lists import (
    ConversationFilter,
    ConversationSummary,
    Cursor,
    TaskFilter,
)

PREVIEW_CHARS = 120
LIVE_TASKS = 50
"""A page of the tasks list holds this many tasks."""


@dataclass(frozen=True)
class TaskRow:
    id: str
    state: str
    """The state, or the completion reason once completed ("cancelled", "success", ...)."""
    running: bool
    conversation_id: str
    channel: str
    sender: str
    when: str
    """When it was accepted."""
    duration: str
    cost: str
    preview: str
    """The message's first line."""
    waiting_for: str = ""
    """What decision the task waits for (its kind, what is asked and the code); "" when
    it waits for none."""
    waiting_code: str = ""


def task_row(task: TaskRecord, now: float, waiting: PendingDecision | None = None) -> TaskRow:
    state = task.state.value
    if task.state is TaskState.COMPLETED and task.completion_reason is not None:
        state = task.completion_reason.value
    elif waiting is not None:
        state = "waiting"
    if task.parsed is not None:
        sender = task.parsed.sender_name or task.parsed.sender_id
        body = task.parsed.body
    else:
        sender, body = task.raw.sender, ""
    return TaskRow(
        id=task.id,
        state=state,
        running=task.state is TaskState.EXECUTING,
        conversation_id=task.conversation_id or "",
        channel=task.channel,
        sender=sender,
        when=when(task.created_at),
        duration=_duration(task, now),
        cost=f"${task.cost_usd:.4f}" if task.cost_usd else "",
        preview=_preview(body),
        waiting_for=waiting.waiting_text if waiting is not None else "",
        waiting_code=waiting.code if waiting is not None else "",
    )


async def task_rows(
    application: Application, *, conversation_id: str | None = None, limit: int = LIVE_TASKS
) -> list[TaskRow]:
    """A conversation's newest tasks, newest first."""
    rows, _ = await task_list(
        application, TaskFilter(conversation_id=conversation_id or ""), limit=limit
    )
    return rows


async def task_list(
    application: Application,
    which: TaskFilter,
    *,
    after: Cursor | None = None,
    limit: int = LIVE_TASKS,
) -> tuple[list[TaskRow], Cursor | None]:
    """A page of the tasks list (newest first) and where the next one starts."""
    page = await application.task_page(which, after=after, limit=limit)
    waiting = waiting_tasks(await application.pending_decisions())
    now = time.time()
    return [task_row(task, now, waiting.get(task.id)) for task in page.tasks], page.next


async def find_conversation(
    application: Application, conversation_id: str
) -> ConversationRecord | None:
    for conversation in await application.conversations(limit=100_000):
        if conversation.id == conversation_id:
            return conversation
    return None


def _duration(task: TaskRecord, now: float) -> str:
    if task.started_at is None:
        return ""
    return span(max(0.0, (task.completed_at or now) - task.started_at))


def age(since: float | None) -> str:
    """How long ago ``since`` was ("" when unknown)."""
    return "" if since is None else span(max(0.0, time.time() - since))


def size(count: int | None) -> str:
    if count is None:
        return ""
    value = float(count)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.2f} GiB"


def _preview(body: str) -> str:
    """The first line with words on it."""
    first = next((line for line in body.splitlines() if line.strip()), "")
    return one_line(first, PREVIEW_CHARS)


def when(at: float | None) -> str:
    if at is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


# -- the overview and the conversations list ---------------------------------------------------


@dataclass(frozen=True)
class PeriodView:
    name: str
    day: str
    """Its first day (YYYY-MM-DD): the lists' ``from`` for the same tasks."""
    tasks: int
    ended: dict[str, int]
    unfinished: int
    cost: str
    failure_rate: str
    p50: str
    p95: str


@dataclass(frozen=True)
class FrontView:
    running: list[TaskRow]
    waiting: list[TaskRow]
    periods: list[PeriodView]
    channels: tuple[ChannelView, ...]
    containers: tuple[ContainerLine, ...]
    containers_error: str


def _period_view(period: Period) -> PeriodView:
    def seconds(value: float | None) -> str:
        return "-" if value is None else span(value)

    rate = "-" if period.failure_rate is None else f"{period.failure_rate:.1f} %"
    return PeriodView(
        period.name,
        time.strftime("%Y-%m-%d", time.localtime(period.since)),
        period.tasks,
        period.ended,
        period.unfinished,
        f"${period.cost_usd:.2f}",
        rate,
        seconds(period.p50_s),
        seconds(period.p95_s),
    )


async def front_view(application: Application, now: float) -> FrontView:
    page = await application.front_page(now)
    return FrontView(
        running=[task_row(t, now, page.decisions.get(t.id)) for t in page.running],
        waiting=[task_row(t, now, page.decisions.get(t.id)) for t in page.waiting],
        periods=[_period_view(period) for period in page.periods],
        channels=page.channels,
        containers=page.containers,
        containers_error=page.containers_error,
    )


@dataclass(frozen=True)
class ConversationRow:
    id: str
    channel: str
    title: str
    active: bool
    tasks: int
    cost: str
    last_activity: str
    preview: str
    """Its newest message's first line."""


def conversation_row(summary: ConversationSummary) -> ConversationRow:
    conversation, last = summary.conversation, summary.last_message
    parsed = last.parsed if last is not None else None
    return ConversationRow(
        id=conversation.id,
        channel=conversation.channel,
        title=(parsed.room_title if parsed is not None else "") or conversation.channel_key,
        active=conversation.active,
        tasks=summary.tasks,
        cost=f"${summary.cost_usd:.4f}" if summary.cost_usd else "",
        last_activity=when(summary.last_activity),
        preview=_preview(parsed.body) if parsed is not None else "",
    )


async def conversation_rows(
    application: Application, which: ConversationFilter, *, offset: int = 0
) -> tuple[list[ConversationRow], bool]:
    summaries, more = await application.conversation_page(which, offset=offset, limit=LIVE_TASKS)
    return [conversation_row(summary) for summary in summaries], more
