"""The WAL's fsync, made on whichever thread asks (decision 0132): a thread of the
executor for the group flush, or the connection's own right after a message's commit
(``batch_then_sync``), which then hands the commit to the loop before it syncs."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway_bot.state.backend import Row


def batch_then_sync(
    run_batch: Callable[[], list[Any]], committed: asyncio.Future[list[Any]], wal: Path
) -> None:
    """On the connection's thread: ``run_batch`` (BEGIN to COMMIT), its outcome handed to
    the loop at once (``committed``), then, once committed, the WAL's fsync (this call's
    own outcome)."""
    loop = committed.get_loop()
    try:
        rows = run_batch()
    except BaseException as exc:
        loop.call_soon_threadsafe(_settle, committed, None, exc)
        return
    loop.call_soon_threadsafe(_settle, committed, rows, None)
    fsync_file(wal)


async def committed_or_failed(
    committed: asyncio.Future[list[Row]], synced: asyncio.Future[None]
) -> list[Row]:
    """The batch's rows once committed; the call's own error when it failed before the
    batch ran (a connection closing: aiosqlite refuses the call before queueing it)."""
    either: set[asyncio.Future[Any]] = {committed, synced}
    await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    if not committed.done():
        exc = synced.exception() if not synced.cancelled() else None
        if exc is not None:
            committed.cancel()
            raise exc
        await committed  # (the fsync ended first: the rows were handed over before it)
    return committed.result()


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # (its awaiter was cancelled)
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


def fsync_file(path: Path) -> None:
    """fsync a file by name (Linux flushes the inode's data whichever descriptor wrote
    it). No WAL file yet, or none any more (the last connection's close checkpointed and
    removed it, syncing the database file): nothing to flush."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
