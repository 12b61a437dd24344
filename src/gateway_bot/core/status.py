"""The /status answer, as plain text built from plain data."""

from __future__ import annotations

from collections.abc import Sequence

from gateway_bot.domain.records import ConversationRecord

_PREVIEW = 60


def describe_status(
    conversation: ConversationRecord,
    running_task_id: str | None,
    running_body: str | None,
    steps: Sequence[str],
    elapsed_s: float,
    waiting_bodies: Sequence[str],
) -> str:
    model = conversation.model or conversation.next_model or "default model"
    lines = [f"Conversation {conversation.id} ({model})."]
    if running_task_id is None:
        lines.append("Nothing is running.")
    else:
        lines.append(
            f"Running task {running_task_id} for {elapsed_s:.0f} s: {_preview(running_body or '')}"
        )
        if steps:
            lines.append(f"Last step ({len(steps)} so far): {steps[-1]}")
    if waiting_bodies:
        lines.append(f"{len(waiting_bodies)} waiting:")
        lines += [f"  {n}. {_preview(body)}" for n, body in enumerate(waiting_bodies, 1)]
    else:
        lines.append("Queue empty.")
    return "\n".join(lines)


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _PREVIEW else flat[: _PREVIEW - 1] + "…"
