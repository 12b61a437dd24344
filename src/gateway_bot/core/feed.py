"""The change feed: every task state change, published to in-process subscribers.

The store calls ``publish_transition`` after each committed state change (its one place
where task states change, ``transition``, and task creation in ``accept_inbound``). Each
subscriber gets its own bounded buffer and reads it as an async iterator.

Why a slow subscriber loses events instead of slowing the core: a dashboard tab left open
on a busy deployment must never hold up a task. ``publish`` never awaits and never blocks;
when a subscriber's buffer is full, the changes it cannot take are counted and it finds a
``Missed`` marker where they would have been (one marker per gap, in order), so it knows to
re-read the current state through the application API instead of trusting its picture.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType

from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from gateway_bot.domain.records import TaskRecord

DEFAULT_BUFFER = 256


@dataclass(frozen=True)
class TaskChange:
    """A task entered ``state`` (``previous`` None: the task was just accepted)."""

    task_id: str
    channel: str
    conversation_id: str | None
    previous: TaskState | None
    state: TaskState
    completion_reason: CompletionReason | None
    at: float


@dataclass(frozen=True)
class Missed:
    """``count`` changes were dropped here because the subscriber fell behind."""

    count: int


FeedItem = TaskChange | Missed


class Subscription:
    """One subscriber's view of the feed: ``async for item in subscription``. Ends when the
    subscription is closed (``close``, leaving its ``with`` block, or the feed closing)."""

    def __init__(self, feed: ChangeFeed, buffer: int) -> None:
        if buffer < 1:
            raise ValueError("a subscription needs room for at least one change")
        self._feed = feed
        self._limit = buffer
        self._items: collections.deque[FeedItem] = collections.deque()
        self._changes = 0
        """Changes (not markers) in ``_items``; the buffer bound counts only these."""
        self._wakeup = asyncio.Event()
        self.closed = False

    def offer(self, change: TaskChange) -> None:
        """Never blocks: a full buffer turns the change into (or adds it to) a gap marker."""
        if self.closed:
            return
        if self._changes < self._limit:
            self._items.append(change)
            self._changes += 1
        elif self._items and isinstance(self._items[-1], Missed):
            self._items[-1] = Missed(self._items[-1].count + 1)
        else:
            self._items.append(Missed(1))
        self._wakeup.set()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._feed.unsubscribe(self)
            self._wakeup.set()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __aiter__(self) -> AsyncIterator[FeedItem]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[FeedItem]:
        while True:
            while self._items:
                item = self._items.popleft()
                if isinstance(item, TaskChange):
                    self._changes -= 1
                yield item
            if self.closed:
                return
            self._wakeup.clear()
            await self._wakeup.wait()

    def pending(self) -> list[FeedItem]:
        """Take what is buffered now without waiting (for tests and polling readers)."""
        items = list(self._items)
        self._items.clear()
        self._changes = 0
        return items


class ChangeFeed:
    def __init__(self) -> None:
        self._subscribers: list[Subscription] = []

    def subscribe(self, buffer: int = DEFAULT_BUFFER) -> Subscription:
        subscription = Subscription(self, buffer)
        self._subscribers.append(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        if subscription in self._subscribers:
            self._subscribers.remove(subscription)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def publish(self, change: TaskChange) -> None:
        for subscription in list(self._subscribers):
            subscription.offer(change)

    def publish_transition(self, task: TaskRecord, previous: TaskState | None) -> None:
        """The store's hook (``Store.on_transition``): ``task`` as it is after the change."""
        self.publish(
            TaskChange(
                task_id=task.id,
                channel=task.channel,
                conversation_id=task.conversation_id,
                previous=previous,
                state=task.state,
                completion_reason=task.completion_reason,
                at=time.time(),
            )
        )

    def close(self) -> None:
        """End every subscriber's iteration (daemon shutdown)."""
        for subscription in list(self._subscribers):
            subscription.close()
