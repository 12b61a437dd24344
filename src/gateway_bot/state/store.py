"""The store interface the core depends on.

Kept small and database-neutral so that PostgreSQL can replace SQLite later without the
core noticing: the core imports this Protocol, never the SQLite module.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from gateway_bot.core.lifecycle import CompletionReason, TaskState
from gateway_bot.core.messages import InboundMessage, RawMessage, Reply, Usage
from gateway_bot.state.records import ConversationRecord, TaskRecord


class Store(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def accept_inbound(self, raw: RawMessage) -> tuple[str, bool]:
        """Durably record a message and its new task; return (task id, is_new).

        A message id already seen on that channel is a duplicate delivery: its existing
        task id comes back with is_new False and nothing is written.
        """
        ...

    async def get_task(self, task_id: str) -> TaskRecord: ...

    async def tasks_in_states(self, states: Iterable[TaskState]) -> list[TaskRecord]:
        """Oldest first."""
        ...

    async def conversation_tasks(
        self, conversation_id: str, states: Iterable[TaskState]
    ) -> list[TaskRecord]:
        """Oldest first."""
        ...

    async def transition(
        self,
        task_id: str,
        target: TaskState,
        *,
        reason: CompletionReason | None = None,
        conversation_id: str | None = None,
        parsed: InboundMessage | None = None,
        error: str | None = None,
    ) -> TaskRecord:
        """Move a task to ``target``; raises IllegalTransition for a move the lifecycle
        forbids. Entering EXECUTING stamps started_at and counts an attempt."""
        ...

    async def record_reply(self, task_id: str, reply: Reply) -> None:
        """Store the reply before it is sent, so a crash between the two re-sends it
        instead of re-running the agent."""
        ...

    async def mark_reply_delivered(self, task_id: str) -> None: ...

    async def record_usage(self, task_id: str, usage: Usage) -> None: ...

    async def active_conversation(self, channel: str, key: str) -> ConversationRecord | None: ...

    async def get_conversation(self, conversation_id: str) -> ConversationRecord: ...

    async def create_conversation(
        self, channel: str, key: str, model: str | None
    ) -> ConversationRecord:
        """Make a new active conversation for (channel, key), retiring the previous one."""
        ...

    async def update_conversation(
        self,
        conversation_id: str,
        *,
        model: str | None = None,
        agent_session_id: str | None = None,
        clear_session: bool = False,
        last_reply: str | None = None,
        next_model: str | None = None,
    ) -> ConversationRecord: ...
