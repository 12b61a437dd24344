"""The store interface the core depends on.

Kept small and database-neutral so that PostgreSQL can replace SQLite later without the
core noticing: the core imports this Protocol, never the SQLite module.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from gateway_bot.domain.lifecycle import CompletionReason, TaskKind, TaskState
from gateway_bot.domain.messages import InboundMessage, RawMessage, Reply, Usage
from gateway_bot.domain.records import (
    ApprovalRecord,
    ApprovalState,
    ContextLine,
    ConversationRecord,
    TaskRecord,
)
from gateway_bot.state.task_lists import (
    ConversationFilter,
    ConversationSummary,
    Cursor,
    TaskFilter,
    TaskPage,
    TaskTotal,
)


class ApprovalStore(Protocol):
    """Held messages of unknown senders, the owners' decisions, approved room members."""

    async def pending_for(
        self, channel: str, room: str, sender_id: str
    ) -> ApprovalRecord | None: ...

    async def get(self, code: str) -> ApprovalRecord | None: ...

    async def create(
        self,
        *,
        channel: str,
        room: str,
        room_title: str,
        sender_id: str,
        sender_name: str,
        preview: str,
        expires_at: float,
        kind: str = "sender",
    ) -> ApprovalRecord: ...

    async def set_card(
        self, code: str, card_channel: str, card_context: dict[str, Any], card_ref: str
    ) -> None: ...

    async def hold(self, code: str, task_id: str) -> None: ...

    async def held_tasks(self, code: str) -> list[str]: ...

    async def shown_tasks(self, code: str) -> list[str]: ...

    async def mark_shown(self, code: str, task_ids: list[str]) -> None: ...

    async def decide(self, code: str, state: ApprovalState, decided_by: str) -> bool: ...

    async def expired(self, now: float) -> list[ApprovalRecord]: ...

    async def unsent_cards(self) -> list[ApprovalRecord]:
        """Pending approvals whose card never reached the owners (no message reference)."""
        ...

    async def add_member(self, channel: str, room: str, sender_id: str, added_by: str) -> None: ...

    async def is_member(self, channel: str, room: str, sender_id: str) -> bool: ...

    async def member_rooms(self, channel: str, sender_id: str) -> list[tuple[str, str]]: ...

    async def remove_member(self, channel: str, sender_id: str, room: str | None) -> int: ...


class ContextLineStore(Protocol):
    """Context kept from messages that did not engage the bot, per conversation key."""

    async def add(self, channel: str, key: str, line: ContextLine, keep: int) -> None:
        """Keep a line; only the newest ``keep`` of the conversation survive."""
        ...

    async def take(self, channel: str, key: str) -> list[ContextLine]:
        """Return and forget the kept lines, oldest first."""
        ...


TransitionListener = Callable[[TaskRecord, TaskState | None], None]

OnCommitted = Callable[[str, "TaskRecord | None", "asyncio.Future[None]"], None]
"""``accept_inbound``'s ``on_committed(task id, task, on_disk)``."""
"""Told of every committed task state change: the task as it is now, and the state it left
(None for a task just accepted). Called synchronously: it must not block (``core/feed``)."""


class Store(Protocol):
    @property
    def approvals(self) -> ApprovalStore: ...

    @property
    def context_lines(self) -> ContextLineStore: ...

    def on_transition(self, listener: TransitionListener) -> None:
        """Call ``listener`` after every committed state change (the change feed's hook)."""
        ...

    async def list_tasks(
        self,
        *,
        states: Iterable[TaskState] | None = None,
        conversation_id: str | None = None,
        limit: int = 100,
        kind: TaskKind | None = None,
    ) -> list[TaskRecord]:
        """The newest ``limit`` tasks matching the filters, oldest first (read-only views:
        status, dashboard). ``kind``: agent tasks or commands only (None: both)."""
        ...

    async def list_conversations(
        self, *, active: bool | None = None, channel: str | None = None, limit: int = 100
    ) -> list[ConversationRecord]:
        """Most recently updated first."""
        ...

    async def pending_approvals(self) -> list[ApprovalRecord]:
        """Approvals still waiting for an owner, oldest first."""
        ...

    async def count_tasks(
        self, kind: TaskKind = TaskKind.AGENT
    ) -> dict[tuple[TaskState, CompletionReason | None], int]:
        """How many tasks of ``kind`` are in each state (and, once completed, each reason):
        the metrics' task and command gauges, without reading every row."""
        ...

    async def task_page(
        self, which: TaskFilter, *, after: Cursor | None = None, limit: int = 50
    ) -> TaskPage:
        """The dashboard's tasks list: the newest ``limit`` matching tasks older than
        ``after`` (keyset pagination, ``state/task_lists``)."""
        ...

    async def conversation_page(
        self, which: ConversationFilter, *, offset: int = 0, limit: int = 50
    ) -> tuple[list[ConversationSummary], bool]:
        """The dashboard's conversations list, most recently active first, and whether
        more follow."""
        ...

    async def task_totals(self, since: float, kind: TaskKind = TaskKind.AGENT) -> list[TaskTotal]:
        """Tasks accepted since ``since`` per state and reason, with their cost."""
        ...

    async def run_time_percentiles(
        self, since: float, percentiles: tuple[float, ...], kind: TaskKind = TaskKind.AGENT
    ) -> list[float | None]:
        """Percentiles of how long the tasks accepted since ``since`` ran."""
        ...

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def accept_inbound(
        self,
        raw: RawMessage,
        on_committed: OnCommitted | None = None,
        *,
        taking_in: bool = False,
    ) -> tuple[str, bool]:
        """Durably record a message and its new task; return (task id, is_new) once it is
        on disk. ``taking_in``: routing starts as soon as it is committed, so the task is
        written AUTHENTICATING at once (QUEUED otherwise): one write fewer on the way to its
        acknowledgement (issue 33). A start's recovery turns a task left so back to QUEUED.

        A message id already seen on that channel is a duplicate delivery: its existing
        task id comes back with is_new False and nothing is written.

        ``on_committed(task id, task, on_disk)`` is called once the message is committed
        (safe from the process's death) and its flush has begun, so that taking it in
        runs beside the flush; nothing may reach a person before ``on_disk`` resolves,
        nor the source before this call returns (decision 0098). ``task`` is the new task
        as its row reads (routing starts from it without reading it back), None for a
        duplicate. ``on_disk`` is the caller's own: it fails when the flush does.
        """
        ...

    async def flush(self) -> None:
        """Return once every commit made so far is on disk."""
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
        known: TaskRecord | None = None,
        kind: TaskKind | None = None,
    ) -> TaskRecord:
        """Move a task to ``target``; raises IllegalTransition for a move the lifecycle
        forbids. Entering EXECUTING stamps started_at and counts an attempt. ``known``: the
        task as the caller last had it, so it is not read first unless its state has
        changed since (the row is updated only from that state). ``kind``: what routing
        found the message to be (a command), recorded with the same write."""
        ...

    async def save_parsed(self, task_id: str, parsed: InboundMessage) -> None:
        """Keep the parsed message of a task that waits (an approval) in its current state."""
        ...

    async def note_acknowledged(self, task_id: str, at: float) -> None:
        """When the task's acknowledgement was posted (its first; a record for the task's
        waterfall, relaxed: losing it to a power cut loses only that line)."""
        ...

    async def record_reply(self, task_id: str, reply: Reply) -> None:
        """Store the reply before it is sent, so a crash between the two re-sends it
        instead of re-running the agent."""
        ...

    async def mark_reply_delivered(self, task_id: str) -> None: ...

    async def record_delivery_failure(self, task_id: str, error: str) -> None:
        """Say why the stored reply could not be sent (kept until it is)."""
        ...

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
        agent_backend: str | None = None,
        next_agent: str | None = None,
    ) -> ConversationRecord: ...
