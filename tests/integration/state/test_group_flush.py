"""Group commit (``state/group_flush``): commits made while a flush runs share the next
one, none of them is released by a flush that began before it was made, and a commit the
running flush already covers is released with it."""

from __future__ import annotations

import asyncio

import pytest

from gateway_bot.state.group_flush import RELAXED_FLUSH_S, GroupFlush


class Disk:
    """A flush that ends only when the test lets it (what one fsync looks like)."""

    def __init__(self) -> None:
        self.started = 0
        self.release = asyncio.Event()
        self.began = asyncio.Event()
        self.finished = asyncio.Event()

    async def flush(self) -> None:
        self.started += 1
        self.began.set()
        await self.release.wait()
        self.release.clear()
        self.finished.set()


async def test_commits_during_a_flush_share_the_next_one_and_wait_for_it() -> None:
    disk = Disk()
    group = GroupFlush(disk.flush)
    early = group.committed()
    first = asyncio.create_task(group.wait(early))
    await asyncio.wait_for(disk.began.wait(), 10)
    covered = asyncio.create_task(group.wait(early))  # asks late, for an early commit
    later = [asyncio.create_task(group.wait(group.committed())) for _ in range(5)]
    await asyncio.sleep(0.01)
    disk.began.clear()
    disk.release.set()  # flush 1 ends: it began before the five commits were made
    await asyncio.wait_for(asyncio.gather(first, covered), 10)
    await asyncio.wait_for(disk.began.wait(), 10)
    assert not any(task.done() for task in later), "released by a flush that began before"
    assert disk.started == 2, "the five share one flush"
    disk.release.set()
    await asyncio.wait_for(asyncio.gather(*later), 10)
    assert group.flushes == 2
    await asyncio.wait_for(group.wait(early), 10)  # on disk already: no flush
    assert disk.started == 2


async def test_a_relaxed_commit_is_flushed_soon_without_anyone_waiting() -> None:
    disk = Disk()
    group = GroupFlush(disk.flush)
    group.committed()
    group.soon()
    group.soon()
    await asyncio.sleep(RELAXED_FLUSH_S / 5)
    assert disk.started == 0, "a relaxed commit waits a little for someone else's flush"
    await asyncio.wait_for(disk.began.wait(), 10)  # the background flush, on its own
    disk.release.set()
    await asyncio.wait_for(disk.finished.wait(), 10)
    await group.close()
    assert disk.started == 1


async def test_closing_flushes_what_is_pending() -> None:
    disk = Disk()
    disk.release.set()
    group = GroupFlush(disk.flush)
    group.committed()
    group.soon()
    await group.close()
    assert disk.started == 1


async def test_a_flush_asked_for_has_begun_before_the_asker_awaits_anything() -> None:
    """``begun`` starts the flush in the call (a message's flush then runs while its
    routing does, issue 33), and cancelling one asker's future leaves the others'."""
    started: list[int] = []
    release = asyncio.get_running_loop().create_future()

    def flush() -> asyncio.Future[None]:  # (what run_in_executor returns: already going)
        started.append(1)
        return release

    group = GroupFlush(flush)
    first = group.begun(group.committed())
    assert started == [1], "the flush began inside the call"
    second = group.begun()  # covered by the running flush: no second one
    first.cancel()
    release.set_result(None)
    await asyncio.wait_for(second, 10)
    assert started == [1]
    assert group.flushes == 1


async def test_a_flush_the_engine_made_itself_releases_its_commit_and_those_before() -> None:
    """``made``: SQLite syncs a message's commit on its own thread right after it; once
    that is done, an earlier relaxed commit counts as on disk too, with no flush of ours."""
    disk = Disk()
    group = GroupFlush(disk.flush)
    relaxed = group.committed()
    synced: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    on_disk = group.made(group.committed(), synced)
    await asyncio.sleep(0.01)
    assert not on_disk.done(), "released before the engine's sync ended"
    synced.set_result(None)
    await asyncio.wait_for(on_disk, 10)
    await asyncio.wait_for(group.wait(relaxed), 10)
    assert disk.started == 0
    assert group.flushes == 1


async def test_a_sync_the_engine_failed_fails_its_waiter_and_a_later_flush_covers_it() -> None:
    disk = Disk()
    group = GroupFlush(disk.flush)
    synced: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    commit = group.committed()
    on_disk = group.made(commit, synced)
    synced.set_exception(OSError(5, "Input/output error"))
    with pytest.raises(OSError, match="Input/output error"):
        await asyncio.wait_for(on_disk, 10)
    waiting = asyncio.create_task(group.wait(commit))
    await asyncio.wait_for(disk.began.wait(), 10)  # not taken as on disk: flushed again
    disk.release.set()
    await asyncio.wait_for(waiting, 10)
