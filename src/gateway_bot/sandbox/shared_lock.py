"""An exclusive lock taken by every process that works in one directory: replicas sharing a
``state_dir`` (decision 0094) change the same files there (the git mirror), and an
``asyncio.Lock`` keeps apart only the coroutines of one process.

``flock`` on a lock file beside what it guards: the kernel drops it when its holder ends,
however it ends (kill -9 included), so a dead holder never blocks the others; it needs no
database and holds for exactly the processes that see the directory. Two opens of the file
in one process also exclude each other (the lock belongs to the open file description).

Waiting polls with ``LOCK_NB`` rather than blocking a thread in ``flock``: a waiter that is
cancelled leaves no thread behind that would take the lock later with nobody to release it.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

POLL_MAX_S = 0.1
"""The longest pause between two tries while another process holds the lock."""


@asynccontextmanager
async def held(path: Path) -> AsyncIterator[None]:
    """Hold the exclusive lock on ``path`` (made if absent, with its directory) for the
    block; wait as long as another process (or another open in this one) holds it."""
    descriptor = _open(path)  # not in a thread: a waiter cancelled there would leak it
    try:
        pause = 0.005
        while not _try_lock(descriptor):
            await asyncio.sleep(pause)
            pause = min(POLL_MAX_S, pause * 2)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def _open(path: Path) -> int:
    """Never through a link, and only a plain file (O_NONBLOCK: a FIFO there must not hang
    the open); the file's content is never read or written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    descriptor = os.open(path, flags, 0o600)
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise OSError(errno.EINVAL, "the lock file is not a regular file", str(path))
    return descriptor


def _try_lock(descriptor: int) -> bool:
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
