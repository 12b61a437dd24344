"""Rows of the state store as frozen dataclasses, independent of the database behind it."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from gateway_bot.domain.lifecycle import CompletionReason, TaskKind, TaskState
from gateway_bot.domain.messages import InboundMessage, RawMessage, Reply


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
    agent_backend: str | None = None
    """The agent CLI the session belongs to; None: the server's default backend."""
    next_agent: str | None = None
    """Set by /agent: the agent CLI of the next new agent session."""


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
    delivery_error: str | None = None
    """Why the stored reply could not be sent yet (an UNDELIVERED task); None once sent."""
    kind: TaskKind = TaskKind.AGENT
    """An agent task or a command (set when routing answers it as one)."""
    acknowledged_at: float | None = None
    """When its acknowledgement ("Working on it…") was posted; None for none (yet)."""


class ApprovalState(enum.Enum):
    PENDING = "pending"
    ALLOWED = "allowed"
    DENIED = "denied"
    EXPIRED = "expired"


@dataclass(frozen=True)
class ApprovalRecord:
    code: str
    """12 hex characters: short enough to type as ``!approve CODE``, long enough never to
    clash."""
    channel: str
    room: str
    room_title: str
    sender_id: str
    sender_name: str
    preview: str
    state: ApprovalState
    card_channel: str | None
    card_context: dict[str, Any] | None
    card_ref: str | None
    created_at: float
    expires_at: float
    decided_by: str | None
    decided_at: float | None
    kind: str = "sender"
    """"sender": an unknown sender's messages are held; "room": an invitation is;
    "direct": an invitation to a direct chat, whose Join admits the inviter there too."""


@dataclass(frozen=True)
class ContextLine:
    """A message that did not engage the bot, kept to give the next one context."""

    sender_name: str
    body: str
    received_at: float
