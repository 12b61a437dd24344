"""The /status answer, as plain text built from plain data."""

from __future__ import annotations

from collections.abc import Sequence

from gateway_bot.domain.display import one_line
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
    lines = [f"Conversation {conversation.id} ({describe_model(conversation)})."]
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


def describe_model(conversation: ConversationRecord) -> str:
    """The model the session runs, and the one ``/model`` chose for the next session when
    it differs: a started session keeps its model, so the chosen one is not "in use" yet."""
    if conversation.agent_session_id is None:
        return conversation.next_model or "default model"
    current = conversation.model or "default model"
    chosen = conversation.next_model
    if chosen and chosen != conversation.model:
        return f"{current}; {chosen} from the next /new"
    return current


def _preview(text: str) -> str:
    return one_line(text, _PREVIEW)
