"""Rows of the state store as frozen dataclasses, independent of the database behind it."""

from __future__ import annotations

from dataclasses import dataclass

from gateway_bot.core.lifecycle import CompletionReason, TaskState
from gateway_bot.core.messages import InboundMessage, RawMessage, Reply


@dataclass(frozen=True)
class ConversationRecord:
    id: str
    """8 hex characters; names the conversation's directory and (later) its container."""
    channel: str
    channel_key: str
    model: str | None
    agent_session_id: str | None
    last_reply: str | None
    next_model: str | None
    """Set by /model: used when the next new agent session starts."""
    active: bool
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class TaskRecord:
    id: str
    """12 hex characters, stable from acceptance to completion."""
    channel: str
    message_id: str
    conversation_id: str | None
    state: TaskState
    completion_reason: CompletionReason | None
    raw: RawMessage
    parsed: InboundMessage | None
    reply: Reply | None
    reply_delivered: bool
    created_at: float
    started_at: float | None
    completed_at: float | None
    cost_usd: float
    num_turns: int
    error: str | None
    attempts: int
