"""The change feed: a subscriber sees every state change of a task in order, a slow one
loses changes (and is told where) instead of holding up the core, and closing ends it."""

from __future__ import annotations

import asyncio

from gateway_bot.core.feed import ChangeFeed, FeedItem, Missed, Subscription, TaskChange
from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from tests.core.conftest import World


def watch(world: World, feed: ChangeFeed) -> None:
    world.store.on_transition(feed.publish_transition)


async def test_a_subscriber_sees_a_tasks_whole_path_in_order(world: World) -> None:
    feed = ChangeFeed()
    watch(world, feed)
    with feed.subscribe() as subscription:
        message = await world.say("hello")
        await world.completed(message)
        task_id = await world.task_id(message)
        changes = [
            c for c in subscription.pending() if isinstance(c, TaskChange) and c.task_id == task_id
        ]
    assert [(c.previous, c.state) for c in changes] == [
        # Taken in as soon as it is stored: written AUTHENTICATING from the first (issue 33).
        (None, TaskState.AUTHENTICATING),
        (TaskState.AUTHENTICATING, TaskState.PENDING),
        (TaskState.PENDING, TaskState.EXECUTING),
        (TaskState.EXECUTING, TaskState.COMPLETED),
    ]
    assert changes[-1].completion_reason is CompletionReason.SUCCESS
    assert changes[-1].conversation_id is not None
    assert feed.subscriber_count == 0, "leaving the block unsubscribes"


async def test_an_async_iterator_follows_changes_as_they_happen(world: World) -> None:
    feed = ChangeFeed()
    watch(world, feed)
    subscription = feed.subscribe()
    seen: list[TaskState] = []

    async def follow() -> None:
        async for item in subscription:
            assert isinstance(item, TaskChange)
            seen.append(item.state)
            if item.state is TaskState.COMPLETED:
                return

    follower = asyncio.create_task(follow())
    await world.completed(await world.say("hello"))
    await asyncio.wait_for(follower, 10)
    assert seen[0] is TaskState.AUTHENTICATING
    assert seen[-1] is TaskState.COMPLETED
    subscription.close()


async def test_a_slow_subscriber_drops_changes_with_a_marker_and_never_blocks(
    world: World,
) -> None:
    feed = ChangeFeed()
    watch(world, feed)
    slow = feed.subscribe(buffer=2)
    keen = feed.subscribe()
    messages = [await world.say(f"message {n}", room=f"r{n}") for n in range(3)]
    for message in messages:
        await world.completed(message)  # the core went on although nobody read ``slow``

    # A change is published right after its commit: the last one may follow the moment a
    # poller sees the task completed, so wait for it rather than race it.
    everything = await _collect(world, keen, 12)
    assert len(everything) == 12, "3 tasks x 4 changes, none lost for a reader that keeps up"
    items: list[FeedItem] = slow.pending()
    assert items[:2] == everything[:2]
    assert items[2] == Missed(10)
    assert len(items) == 3

    later = await world.say("after the gap", room="r9")
    await world.completed(later)
    fresh = await _collect(world, keen, 4)
    after = slow.pending()
    assert after[:2] == fresh[:2], "reading again resumes the stream"
    assert isinstance(after[-1], Missed), "and falls behind again when not read"


async def _collect(world: World, subscription: Subscription, count: int) -> list[FeedItem]:
    """Everything ``subscription`` receives until it holds ``count`` items."""
    seen: list[FeedItem] = []

    def enough() -> bool:
        seen.extend(subscription.pending())
        return len(seen) >= count

    await world.until(enough, f"{count} changes on the feed")
    return seen


async def test_closing_the_feed_ends_every_subscribers_iteration() -> None:
    feed = ChangeFeed()
    subscription = feed.subscribe()
    collected: list[FeedItem] = []

    async def drain() -> None:
        async for item in subscription:
            collected.append(item)

    reader = asyncio.create_task(drain())
    await asyncio.sleep(0)
    feed.close()
    await asyncio.wait_for(reader, 5)
    assert collected == []
    assert feed.subscriber_count == 0


async def test_a_failing_listener_does_not_fail_the_store(world: World) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("a subscriber's bug")

    world.store.on_transition(broken)
    message = await world.say("hello")
    assert (await world.reply(message)).text == "Echo: hello"
    assert (await world.completed(message)).completion_reason is CompletionReason.SUCCESS
