"""Task states, completion reasons and the transitions allowed between them.

Pure data and one function, so the rules are testable without a store or an event loop.
Every state change in the store goes through ``check_transition``; an illegal transition is
a bug and raises instead of silently corrupting the task table.
"""

from __future__ import annotations

import enum


class TaskState(enum.Enum):
    QUEUED = "queued"
    """Stored, not yet authenticated."""
    AUTHENTICATING = "authenticating"
    PENDING = "pending"
    """Authenticated, waiting for its conversation or for a global slot."""
    EXECUTING = "executing"
    UNDELIVERED = "undelivered"
    """Ran; its reply is stored but the channel would not take it. Sent again (never
    recomputed) by the service's sweep and at every start; the conversation moves on."""
    COMPLETED = "completed"


class TaskKind(enum.Enum):
    """What an accepted message turned out to be. Every message is a task row (it is stored
    before the ack and routed under the same lifecycle), but only an agent task is work an
    operator counts: lists, charts and metrics keep commands apart from it."""

    AGENT = "agent"
    """A message for the agent (and every message until routing says otherwise)."""
    COMMAND = "command"
    """A chat command, a card's decision or a typed answer to a question the daemon
    asked: answered by the daemon at once, never by the agent."""


class CompletionReason(enum.Enum):
    SUCCESS = "success"
    AUTH_FAILED = "auth_failed"
    UNAUTHORIZED = "unauthorized"
    EXECUTION_FAILED = "execution_failed"
    TIMEOUT = "timeout"
    INTERNAL_ERROR = "internal_error"
    REJECTED = "rejected"
    CANCELLED = "cancelled"


_ALLOWED: dict[TaskState, frozenset[TaskState]] = {
    TaskState.QUEUED: frozenset({TaskState.AUTHENTICATING, TaskState.COMPLETED}),
    TaskState.AUTHENTICATING: frozenset(
        {TaskState.PENDING, TaskState.EXECUTING, TaskState.COMPLETED, TaskState.QUEUED}
    ),
    TaskState.PENDING: frozenset({TaskState.EXECUTING, TaskState.COMPLETED}),
    TaskState.EXECUTING: frozenset({TaskState.COMPLETED, TaskState.PENDING, TaskState.UNDELIVERED}),
    TaskState.UNDELIVERED: frozenset({TaskState.COMPLETED}),
    TaskState.COMPLETED: frozenset(),
}
"""EXECUTING -> PENDING exists only for crash recovery: a task caught mid-run by a kill -9
is run again. AUTHENTICATING -> QUEUED is for recovery too, and for a message whose channel
could not be reached to parse it: it is taken up again later."""


class IllegalTransition(RuntimeError):
    pass


def check_transition(current: TaskState, target: TaskState) -> None:
    if target not in _ALLOWED[current]:
        raise IllegalTransition(f"task cannot go from {current.value} to {target.value}")
