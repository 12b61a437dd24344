"""What the scheduler (``core/conversations/queue.py``) keeps per conversation and what it needs of
the rest: the running task /stop and /status read, a conversation's lane, the executor it
hands a task to, and the replicas' claims it asks before running one. Apart so that
readers of a running task (the chat commands) need not import the scheduler itself.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from gateway_bot.agents.base import OnEvent
from gateway_bot.core.channel import AttachmentDownloads
from gateway_bot.core.conversations.executor import TaskResult
from gateway_bot.core.conversations.progress import ProgressReporter
from gateway_bot.domain.messages import InboundMessage, Reply
from gateway_bot.domain.records import ConversationRecord

STOPPED_TEXT = "Stopped. The task was cancelled with /stop."
"""The answer to a task /stop ended: its run cancelled, or its wait for its host."""


class Executes(Protocol):
    """Runs one task to a reply without sending it (``core/executor.TaskExecutor``)."""

    async def execute(
        self,
        task_id: str,
        conversation: ConversationRecord,
        message: InboundMessage,
        adapter: AttachmentDownloads,
        on_event: OnEvent,
    ) -> TaskResult: ...


class ConversationClaims(Protocol):
    """Several replicas on one database (``core/replicas/duties.py``): which conversations this
    replica may run now. Absent (None) for a single daemon, which runs everything it
    queues without asking anyone."""

    def holds(self, conversation_id: str) -> bool:
        """This replica has the conversation's claim (a local answer, no database)."""
        ...

    def wanted(self, conversation_id: str) -> None:
        """A task was queued for a conversation this replica does not hold: claim it if
        free (its pending tasks then come back through ``enqueue``), else leave it."""
        ...

    def drained(self, conversation_id: str) -> None:
        """The conversation's queue here is empty: release its claim."""
        ...

    def claim_token(self, conversation_id: str) -> int | None:
        """The token of this replica's claim on the conversation now; None when it holds
        none. A task takes it when it starts and records its reply under it."""
        ...

    async def record_reply(
        self, conversation_id: str, task_id: str, reply: Reply, token: int
    ) -> bool:
        """Store the reply only if the claim is still this replica's, with ``token``
        (fenced): a run begun under a claim this replica lost, then took again, is refused
        too (the new claim's take-up re-runs the task)."""
        ...


def fenced_record(
    claims: ConversationClaims | None,
    conversation_id: str,
    task_id: str,
    reply: Reply,
    token: int | None,
) -> Callable[[], Awaitable[bool]] | None:
    """How a task's reply is stored (``ReplyDelivery.store_and_send``'s ``record``): by
    the claims, fenced by the claim's ``token`` when the task started, on a replica of
    several; None (the store's own) otherwise."""
    if claims is None:
        return None
    if token is None:
        return _refused
    return lambda: claims.record_reply(conversation_id, task_id, reply, token)


async def _refused() -> bool:
    return False


class RunningTask:
    """The task a conversation is executing now, for /stop and /status: its agent's run, or
    the pause before its next try while its sandbox host is unreachable."""

    def __init__(self, task_id: str, body: str, job: asyncio.Future[Any]) -> None:
        self.task_id = task_id
        self.body = body
        self.job = job
        self.started = time.monotonic()
        self.progress: ProgressReporter | None = None
        self.stop_requested = False
        self.waiting_for: str | None = None
        """What the run waits for a person to allow (action approvals), shown by /status."""
        self.host_down: str | None = None
        """Not a run: the pause of a task whose sandbox host (named) is unreachable."""
        self.acknowledged: Callable[[], Awaitable[None]] | None = None
        """Returns once the task's acknowledgement is out (``task_gates.Acknowledged``):
        what the run shows the person (a card) comes after it."""

    def request_stop(self) -> None:
        """Cancel the agent's run; the scheduler answers "Stopped." and moves on."""
        self.stop_requested = True
        self.job.cancel()


class ConversationLane:
    """One conversation's share of the scheduler."""

    def __init__(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        self.queue: collections.deque[str] = collections.deque()
        """Task ids in arrival order; the head is the task in progress (running, or waiting
        for its acknowledgement or a global slot)."""
        self.before: dict[str, asyncio.Task[None]] = {}
        """Per task, a job to finish first (its acknowledgement), so people see "Working on
        it" before the progress display; it never decides whether the task runs."""
        self.drainer: asyncio.Task[None] | None = None
        self.answering: str | None = None
        """The head task once its agent is done, while its reply is stored and sent: a
        message that comes now is not queued behind it (its sender may have read that reply
        already, before the last progress edit)."""
        self.running: RunningTask | None = None
