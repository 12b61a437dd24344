"""What the pages show, shaped from the application API's records: plain rows for the
templates, so templates hold no logic beyond loops and the records' text is escaped there
(autoescape) and nowhere else."""

from __future__ import annotations

import time
from dataclasses import dataclass

from gateway_bot.core.application import Application
from gateway_bot.core.decisions import PendingDecision, waiting_tasks
from gateway_bot.domain.display import one_line, span
from gateway_bot.domain.lifecycle import TaskState
from gateway_bot.domain.records import ConversationRecord, TaskRecord

PREVIEW_CHARS = 120
LIVE_TASKS = 50
"""The tasks page shows the newest this many tasks."""


@dataclass(frozen=True)
class TaskRow:
    id: str
    state: str
    """The state, or the completion reason once completed ("cancelled", "success", ...)."""
    running: bool
    conversation_id: str
    channel: str
    sender: str
    model: str
    duration: str
    cost: str
    preview: str
    waiting_for: str = ""
    """What decision the task waits for (its kind, what is asked and the code); "" when
    it waits for none."""
    waiting_code: str = ""


def task_row(
    task: TaskRecord,
    conversation: ConversationRecord | None,
    now: float,
    waiting: PendingDecision | None = None,
) -> TaskRow:
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
    model = (conversation.model or "") if conversation else ""
    return TaskRow(
        id=task.id,
        state=state,
        running=task.state is TaskState.EXECUTING,
        conversation_id=task.conversation_id or "",
        channel=task.channel,
        sender=sender,
        model=model or "default",
        duration=_duration(task, now),
        cost=f"${task.cost_usd:.4f}" if task.cost_usd else "",
        preview=_preview(body),
        waiting_for=waiting.waiting_text if waiting is not None else "",
        waiting_code=waiting.code if waiting is not None else "",
    )


async def task_rows(
    application: Application, *, conversation_id: str | None = None, limit: int = LIVE_TASKS
) -> list[TaskRow]:
    """Newest first, with each task's conversation's model."""
    tasks = await application.tasks(conversation_id=conversation_id, limit=limit)
    conversations = {c.id: c for c in await application.conversations(limit=1000)}
    waiting = waiting_tasks(await application.pending_decisions())
    now = time.time()
    return [
        task_row(task, conversations.get(task.conversation_id or ""), now, waiting.get(task.id))
        for task in reversed(tasks)
    ]


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
    return one_line(body, PREVIEW_CHARS)


def when(at: float | None) -> str:
    if at is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
