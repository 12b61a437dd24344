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
    COMPLETED = "completed"


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
    TaskState.EXECUTING: frozenset({TaskState.COMPLETED, TaskState.PENDING}),
    TaskState.COMPLETED: frozenset(),
}
"""AUTHENTICATING -> QUEUED and EXECUTING -> PENDING exist only for crash recovery: a task
caught mid-step by a kill -9 goes back one step and is done again."""


class IllegalTransition(RuntimeError):
    pass


def check_transition(current: TaskState, target: TaskState) -> None:
    if target not in _ALLOWED[current]:
        raise IllegalTransition(f"task cannot go from {current.value} to {target.value}")
