"""Background jobs of the service, aiojobs-style: spawn, wait until idle, close.

Why not bare ``asyncio.create_task``: a task nobody holds can be garbage-collected
mid-run, its exception is only reported when it is, and shutdown needs to know what is
still in flight (to wait for it, then cancel it). Every job of the service goes through one
``Jobs``, so "idle" means no message is being taken in, run or answered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


class Jobs:
    def __init__(self) -> None:
        self._running: set[asyncio.Task[Any]] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False

    def __len__(self) -> int:
        return len(self._running)

    @property
    def closed(self) -> bool:
        return self._closed

    def spawn(
        self, coroutine: Coroutine[Any, Any, Any], name: str | None = None
    ) -> asyncio.Task[Any]:
        if self._closed:
            coroutine.close()
            raise RuntimeError("jobs are closed: the service is shutting down")
        job = asyncio.create_task(coroutine, name=name)
        self._running.add(job)
        self._idle.clear()
        job.add_done_callback(self._finished)
        return job

    def _finished(self, job: asyncio.Task[Any]) -> None:
        self._running.discard(job)
        if not self._running:
            self._idle.set()
        if not job.cancelled() and job.exception() is not None:
            log.error("background job %s failed", job.get_name(), exc_info=job.exception())

    async def wait_idle(self, timeout_s: float | None) -> bool:
        """Wait until no job runs; False if the timeout passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        """Cancel what still runs and wait for it to unwind; no new job starts after this."""
        self._closed = True
        for job in list(self._running):
            job.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
