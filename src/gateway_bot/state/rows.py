"""Rows of the core's tables turned back into records (and a stored raw message stripped of
its payload for retention): shared by the store and its read-only queries."""

from __future__ import annotations

import json

from gateway_bot.domain.lifecycle import CompletionReason, TaskKind, TaskState
from gateway_bot.domain.messages import InboundMessage, RawMessage, Reply
from gateway_bot.domain.records import ConversationRecord, TaskRecord
from gateway_bot.state.backend import Row


def without_payload(raw_json: str) -> str:
    raw = json.loads(raw_json)
    raw["payload"] = {}
    return json.dumps(raw)


def task_from_row(row: Row) -> TaskRecord:
    return TaskRecord(
        id=row["id"],
        channel=row["channel"],
        message_id=row["message_id"],
        conversation_id=row["conversation_id"],
        state=TaskState(row["state"]),
        completion_reason=(
            CompletionReason(row["completion_reason"]) if row["completion_reason"] else None
        ),
        raw=RawMessage.from_json(json.loads(row["raw_json"])),
        parsed=(
            InboundMessage.from_json(json.loads(row["parsed_json"])) if row["parsed_json"] else None
        ),
        reply=Reply.from_json(json.loads(row["reply_json"])) if row["reply_json"] else None,
        reply_delivered=bool(row["reply_delivered"]),
        created_at=row["created_at"],
        started_at=row["started_at"],
        completed_at=row["completed_at"],
        cost_usd=row["cost_usd"],
        num_turns=row["num_turns"],
        error=row["error"],
        attempts=row["attempts"],
        delivery_error=row["delivery_error"],
        kind=TaskKind(row["kind"]),
        acknowledged_at=row["acknowledged_at"],
    )


def conversation_from_row(row: Row) -> ConversationRecord:
    return ConversationRecord(
        id=row["id"],
        channel=row["channel"],
        channel_key=row["channel_key"],
        model=row["model"],
        agent_session_id=row["agent_session_id"],
        last_reply=row["last_reply"],
        next_model=row["next_model"],
        active=bool(row["active"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        agent_backend=row["agent_backend"],
        next_agent=row["next_agent"],
    )
