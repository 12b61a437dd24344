"""A message is taken in (parsed, routed) while its flush runs (decision 0098: group commit),
but it joins its conversation's lane only once it is on disk, and nobody hears of it
before: not the source (``submit`` returns, the channel then acks or deletes it there) and
not the person (the acknowledgement)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from gateway_bot.domain.lifecycle import TaskState
from gateway_bot.domain.records import TaskRecord
from gateway_bot.state import wal_sync
from tests.core.conftest import World


class HeldDisk:
    """The real fsync, held back (and failed, when asked, the first time) until the test
    lets it run: every flush the store makes, the group flush's and the one a message's
    commit makes in its own trip to SQLite's thread (``SqliteBackend.batch_synced``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, fail_first: bool = False) -> None:
        self.let_go = threading.Event()
        self.failed = threading.Event()
        self._fail_first = fail_first
        real = wal_sync.fsync_file

        def held(path: Path) -> None:
            if self._fail_first and not self.failed.is_set():
                self.failed.set()
                raise OSError(5, "Input/output error")
            self.let_go.wait(30)
            real(path)

        monkeypatch.setattr(wal_sync, "fsync_file", held)


async def test_a_message_is_parsed_during_its_flush_and_queued_and_acknowledged_after_it(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = HeldDisk(monkeypatch)
    states: list[TaskState] = []

    def seen(task: TaskRecord, previous: TaskState | None) -> None:
        states.append(task.state)

    world.store.on_transition(seen)
    submitted = asyncio.create_task(world.say("hello"))
    try:
        await world.until(lambda: world.channel.parsed, "the message parsed during its flush")
        await asyncio.sleep(0.2)  # room for a task that did not wait to reach its lane
        assert not submitted.done(), "the source was told before the message was on disk"
        assert TaskState.PENDING not in states, "queued before it was on disk"
        assert not world.channel.seen("dm", "ack"), "acknowledged before it was on disk"
    finally:
        disk.let_go.set()  # (a failure must not leave the store's close waiting on it)
    message_id = await asyncio.wait_for(submitted, 30)
    await world.until(lambda: world.channel.seen("dm", "ack"), "the acknowledgement")
    assert (await world.reply(message_id)).text == "Echo: hello"


async def test_a_message_whose_flush_failed_is_answered_once_a_later_flush_succeeds(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk refuses the message's flush (EIO; on PostgreSQL a connection lost during the
    synchronous commit): the source is not told (submit raises, the channel would deliver it
    again), nobody hears of the message while the next flush is still out, and it is
    answered once that one succeeds, without a restart. It was acknowledged at once with no
    flush behind it, or left mid-authentication until the next start."""
    disk = HeldDisk(monkeypatch, fail_first=True)
    try:
        with pytest.raises(OSError, match="Input/output error"):
            await world.say("hello")
        await asyncio.sleep(0.3)  # room for a task that did not wait for a flush
        assert not world.channel.seen("dm", "ack"), "acknowledged after its flush failed"
        assert not world.channel.seen("dm", "reply"), "answered after its flush failed"
    finally:
        disk.let_go.set()
    await world.until(lambda: world.channel.seen("dm", "ack"), "the acknowledgement")
    await world.until(lambda: world.channel.seen("dm", "reply"), "the answer")
    assert world.channel.texts("dm", "reply") == ["Echo: hello"]
