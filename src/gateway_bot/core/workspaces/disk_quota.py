"""A conversation's disk limit: measure what its agent can write, stop a task over it.

One conversation must not fill the host's disk (then every SQLite write fails, for every
conversation). No filesystem quota is used: project quotas need an xfs or ext4 filesystem
mounted with them and root's quota tools, which most hosts (this project's machines among
them) do not have. Instead the directories the agent can write are measured before a task
starts and every few seconds while it runs: the context's own (workspace, home, inbox,
outbox, storage) through the sandbox (``ContextFiles.measure``: where they live, the
sandbox knows), and ``sent/`` here, where what the agent leaves in its outbox is copied (a
sparse file there costs its full size). The walk
(``sandbox/disk_usage.py``) never follows a link and is bounded; a tree it could not
finish counts as over the limit, because what could not be measured could hide anything.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from gateway_bot.sandbox.disk_usage import MAX_DEPTH, MAX_ENTRIES, DiskUsage

log = logging.getLogger(__name__)

MB = 1024 * 1024

T = TypeVar("T")


@dataclass(frozen=True)
class DiskLimit:
    """The directories of one conversation the agent can write, and their limit."""

    measure: Callable[[], Awaitable[DiskUsage]]
    """Bytes on disk per directory the user knows by name (workspace, home...)."""
    limit_bytes: int
    interval_s: float

    async def over_limit(self) -> DiskUsage | None:
        usage = await self.measure()
        return usage if usage.total > self.limit_bytes or not usage.complete else None

    async def watch(self) -> DiskUsage:
        """Return the first measurement over the limit, checking every ``interval_s`` (the
        caller measured just before). Waits at least twice as long as a measurement took,
        so a huge tree costs a third of a core at most."""
        pause = self.interval_s
        while True:
            await asyncio.sleep(pause)
            started = time.monotonic()
            try:
                usage = await self.over_limit()
            except OSError:
                log.exception("measuring a conversation's directories failed")
                usage = None
            if usage is not None:
                return usage
            pause = max(self.interval_s, 2 * (time.monotonic() - started))

    async def run_within(self, work: Awaitable[T]) -> T | DiskUsage:
        """Run ``work`` while watching the directories. Over the limit, ``work`` is
        cancelled (cancelling an agent run kills its processes) and the measurement that
        stopped it is returned. Cancelling this cancels both."""
        job = asyncio.ensure_future(work)
        watcher = asyncio.create_task(self.watch())
        try:
            await asyncio.wait({job, watcher}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            job.cancel()
            watcher.cancel()
            await asyncio.wait({job, watcher})
            raise
        if job.done():
            watcher.cancel()
            await asyncio.wait({watcher})
            return job.result()
        job.cancel()
        await asyncio.wait({job})  # the run's own clean-up (kill, wait) finishes here
        return watcher.result()

    def explain(self, usage: DiskUsage, *, stopped: bool) -> str:
        """What the user reads: what happened, which directory is large, what to do."""
        what = (
            "The task was stopped: this conversation's files"
            if stopped
            else "This message was not run: this conversation's files"
        )
        if usage.complete:
            size = f"take {_mb(usage.total)}, over its limit of {_mb(self.limit_bytes)}"
        else:
            size = (
                f"hold more than {MAX_ENTRIES:,} entries or nest deeper than {MAX_DEPTH} "
                f"levels, which counts as over its limit of {_mb(self.limit_bytes)}"
            )
        sizable = [(name, used) for name, used in usage.by_directory if used >= MB // 10]
        sizable = sizable or list(usage.by_directory[:1])
        largest = ", ".join(f"{name} {_mb(used)}" for name, used in sizable[:3])
        return (
            f"{what} {size} (largest: {largest}).\n"
            "To go on, start a new conversation with /new; or have the operator delete "
            f"files in this conversation's {usage.by_directory[0][0]} directory on the "
            "server, or raise execution.conversation_disk_limit_mb."
        )


def _mb(size: int) -> str:
    return f"{size / MB:,.1f} MB"
