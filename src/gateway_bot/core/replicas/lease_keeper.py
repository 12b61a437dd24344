"""One lease kept by one replica: take it when free, renew it, give up its duty in time.

A ``LeaseKeeper`` runs a duty (a channel's listener, the sweep) only while this replica
holds the lease named for it (``state/leases_store.py``). The rule that keeps two replicas
from ever running the duty at once, with no clock but each replica's own:

* the holder renews every ``lease/3``; a renewal that fails or does not answer leaves the
  lease valid until the last successful renewal's start plus ``lease``;
* the holder stops the duty at that time minus a safety margin (``lease/5``), whatever the
  database says (it may be unreachable), and only then tries to take the lease again;
* another replica takes the lease only once its ``expires_at`` has passed (the database's
  conditional update), so it starts the duty at least a margin after the holder stopped.

The fencing token a take-over increments is the lease's generation: what the holder writes
under the lease can be checked against it (``LeaseStore.holds``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from gateway_bot.state.leases_store import LeaseStore

log = logging.getLogger(__name__)

Duty = Callable[[], Awaitable[None]]


class LeaseKeeper:
    def __init__(
        self,
        name: str,
        leases: LeaseStore,
        holder: str,
        lease_s: float,
        *,
        start: Duty,
        stop: Duty,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self._leases = leases
        self._holder = holder
        self._lease_s = lease_s
        self._margin_s = lease_s / 5
        self._start = start
        self._stop = stop
        self._clock = clock
        self.token: int | None = None
        """The fencing token while the duty runs here; None otherwise."""
        self._valid_until = 0.0
        self._task: asyncio.Task[None] | None = None

    @property
    def held(self) -> bool:
        return self.token is not None

    def start(self) -> None:
        self._task = asyncio.create_task(self._keep(), name=f"lease-{self.name}")

    async def close(self, *, release: bool = True) -> None:
        """Stop the duty (if it runs here) and hand the lease back at once."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        token = self.token
        await self._give_up("this replica is stopping")
        if release and token is not None:
            try:
                await self._leases.release(self.name, self._holder, token)
            except Exception as exc:
                log.warning("lease %s: not released (%r); it expires by itself", self.name, exc)

    async def _keep(self) -> None:
        poll_s = max(0.05, min(1.0, self._lease_s / 6))
        while True:
            if self.token is None:
                await self._try_to_take()
                if self.token is None:
                    await asyncio.sleep(poll_s)
                continue
            # Never sleep past the point where the duty must stop without a renewal.
            left = self._valid_until - self._margin_s - self._clock()
            await asyncio.sleep(max(0.0, min(self._lease_s / 3, left)))
            await self._renew()

    async def _try_to_take(self) -> None:
        now = self._clock()
        try:
            token = await self._leases.acquire(self.name, self._holder, now, self._lease_s)
        except Exception as exc:
            log.warning("lease %s: could not ask for it (%r)", self.name, exc)
            return
        if token is None:
            return
        self.token, self._valid_until = token, now + self._lease_s
        log.info("lease %s: taken (token %d); starting its duty", self.name, token)
        try:
            await self._start()
        except Exception:
            log.exception("lease %s: its duty did not start; handing the lease back", self.name)
            await self._give_up("its duty did not start")
            await self._leases.release(self.name, self._holder, token)

    async def _renew(self) -> None:
        assert self.token is not None
        asked_at = self._clock()
        deadline = self._valid_until - self._margin_s - asked_at
        renewed: bool | None = None
        if deadline > 0:
            try:
                renewed = await asyncio.wait_for(
                    self._leases.renew(
                        self.name, self._holder, self.token, asked_at, self._lease_s
                    ),
                    timeout=deadline,
                )
            except Exception as exc:
                log.warning("lease %s: renewal failed (%r)", self.name, exc)
        if renewed:
            self._valid_until = asked_at + self._lease_s
        elif renewed is False:
            await self._give_up("another replica holds it now")
        elif self._clock() >= self._valid_until - self._margin_s:
            await self._give_up("it could not be renewed before it expires")

    async def _give_up(self, why: str) -> None:
        if self.token is None:
            return
        log.warning("lease %s: stopping its duty: %s", self.name, why)
        self.token = None
        try:
            await self._stop()
        except Exception:
            log.exception("lease %s: stopping its duty failed", self.name)
