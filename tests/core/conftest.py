"""The fast tier: the real GatewayService, scheduler and SqlStore (on a temp file), with an
in-memory channel and agent, so a test runs in milliseconds and no claude runs.

Tests talk as people do (``world.say``) and assert what people see in a room
(``world.channel.texts``) and what the store says of a task.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway_bot.config.access import AccessSettings
from gateway_bot.config.action_rules import ActionApprovalSettings
from gateway_bot.config.ha import HaSettings
from gateway_bot.core.replicas.duties import Replicas
from gateway_bot.core.retries import RetryPolicy
from gateway_bot.core.service import GatewayService
from gateway_bot.domain.messages import RawMessage
from gateway_bot.domain.records import TaskRecord
from gateway_bot.state.action_approvals_store import SqlActionApprovals
from gateway_bot.state.database import StateTarget
from gateway_bot.state.leases_store import LeaseStore
from gateway_bot.state.schedules_store import SqlSchedules
from gateway_bot.state.sql_store import SqlStore
from tests.core.fakes import BareChannel, FakeAgent, FakeChannel, Sent

FAST = RetryPolicy(attempts=3, first_wait_s=0.01, max_wait_s=0.02)
"""Three attempts in a few milliseconds: the policy's shape without the test waiting."""
PATIENT = RetryPolicy(attempts=5, first_wait_s=30.0, max_wait_s=30.0)
"""Minutes of retrying: for tests that show others are not kept waiting meanwhile."""

DEADLINE_S = 10.0


def owners_access(**more: Any) -> AccessSettings:
    return AccessSettings.model_validate(
        {
            "owners": {"fake": ["owner"]},
            "approval_destination": {"channel": "fake", "context": {"room": "owners"}},
            **more,
        }
    )


class World:
    """One gateway with one fake channel and a fake agent, restartable on the same store."""

    def __init__(
        self,
        tmp_path: Path,
        *,
        access: AccessSettings | None = None,
        max_concurrent: int = 4,
        max_pending: int = 3,
        policy: RetryPolicy = FAST,
        channel: BareChannel | None = None,
        state: StateTarget | None = None,
        actions: ActionApprovalSettings | None = None,
        sweep_interval_s: float = 0.05,
        files_wait_s: float = 0.0,
        schedules: bool = False,
    ) -> None:
        """``state``: where the store lives (default ``<tmp_path>/state.db``).
        ``sweep_interval_s``: short for tests; the benchmarks use the daemon's.
        ``schedules``: the service runs schedules (and so schedule proposals)."""
        self.store = SqlStore(state if state is not None else tmp_path / "state.db")
        self.channel = channel if channel is not None else FakeChannel()
        self.agent = FakeAgent()
        self.access = access or owners_access()
        self.max_concurrent = max_concurrent
        self.max_pending = max_pending
        self.policy = policy
        self.service: GatewayService | None = None
        self.actions = actions
        """Action approvals' settings; None: off (decision 0087)."""
        self.sweep_interval_s = sweep_interval_s
        self.files_wait_s = files_wait_s
        """How long files sent alone wait for words (``core/intake/lone_files.py``)."""
        self.schedules = schedules
        self._ids = itertools.count(1)
        self._opened = False
        self.before_start: Callable[[GatewayService], None] | None = None
        """Given the service before it starts (a replica's coordinator attaches there)."""

    async def start(self) -> GatewayService:
        if not self._opened:
            await self.store.open()
            self._opened = True
        self.service = GatewayService(
            self.store,
            {self.channel.name: self.channel},  # type: ignore[dict-item]
            self.agent,
            access=self.access,
            timezone="UTC",
            max_concurrent_tasks=self.max_concurrent,
            max_pending_per_conversation=self.max_pending,
            retry_policy=self.policy,
            sweep_interval_s=self.sweep_interval_s,
            action_records=(
                SqlActionApprovals(self.store.database) if self.actions is not None else None
            ),
            action_settings=self.actions,
            files_wait_s=self.files_wait_s,
            schedules=SqlSchedules(self.store.database) if self.schedules else None,
            schedule_clock=time.time,
        )
        if self.service.action_approvals is not None:
            self.agent.ask_action = self.service.action_approvals.ask
        if self.before_start is not None:
            self.before_start(self.service)
        await self.service.start()
        return self.service

    async def stop(self, timeout_s: float = 0.0) -> None:
        if self.service is not None:
            await self.service.shutdown(timeout_s)
            self.service = None

    async def restart(self) -> GatewayService:
        """A new daemon on the same database: what survives is what the store kept."""
        await self.stop()
        self.channel.listener.submit = None
        return await self.start()

    async def close(self) -> None:
        await self.stop()
        self.channel.mend()
        if self._opened:
            await self.store.close()

    # -- people ----------------------------------------------------------------------------

    async def hear(self, payload: dict[str, Any], sender: str) -> str:
        submit = self.channel.listener.submit
        assert submit is not None, "the service is not listening"
        message_id = f"m{next(self._ids)}"
        raw_payload = {"room": "dm", **payload}
        assert await submit(RawMessage("fake", message_id, sender, raw_payload, time.time()))
        return message_id

    async def say(
        self,
        text: str,
        *,
        room: str = "dm",
        sender: str = "alice",
        thread: str | None = None,
        direct: bool = True,
    ) -> str:
        payload: dict[str, Any] = {"text": text, "room": room, "direct": direct}
        if thread:
            payload["thread"] = thread
        return await self.hear(payload, sender)

    async def click(self, code: str, choice: str, *, sender: str = "owner") -> str:
        action = f"approval:{code}:{choice}"
        return await self.hear({"kind": "click", "action": action, "room": "owners"}, sender)

    # -- what happened -----------------------------------------------------------------------

    async def until(self, check: Callable[[], Any], what: str, within_s: float = DEADLINE_S) -> Any:
        deadline = time.monotonic() + within_s
        while True:
            result = check()
            if result:
                return result
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.005)

    async def task_id(self, message_id: str) -> str:
        row = await self.store.database.fetch_one(
            "SELECT task_id FROM inbound_messages WHERE message_id = ?", (message_id,)
        )
        assert row is not None, f"message {message_id} was not stored"
        return str(row[0])

    async def task(self, message_id: str) -> TaskRecord:
        return await self.store.get_task(await self.task_id(message_id))

    async def reply(self, message_id: str, within_s: float = DEADLINE_S) -> Sent:
        task_id = await self.task_id(message_id)

        def found() -> Sent | None:
            hits = [s for s in self.channel.sent if s.kind == "reply" and s.task_id == task_id]
            return hits[0] if hits else None

        sent: Sent = await self.until(found, f"the reply to {message_id}", within_s)
        return sent

    async def settled(self, message_id: str, within_s: float = DEADLINE_S) -> TaskRecord:
        """Wait until the task is done with (completed, or its reply parked undelivered)."""
        task_id = await self.task_id(message_id)
        deadline = time.monotonic() + within_s
        while True:
            task = await self.store.get_task(task_id)
            if task.state.value in ("completed", "undelivered"):
                return task
            assert time.monotonic() < deadline, f"task {task_id} stuck in {task.state.value}"
            await asyncio.sleep(0.005)

    async def completed(self, message_id: str, within_s: float = DEADLINE_S) -> TaskRecord:
        task_id = await self.task_id(message_id)
        deadline = time.monotonic() + within_s
        while True:
            task = await self.store.get_task(task_id)
            if task.state.value == "completed":
                return task
            assert time.monotonic() < deadline, f"task {task_id} stuck in {task.state.value}"
            await asyncio.sleep(0.005)

    async def idle(self) -> None:
        assert self.service is not None
        assert await self.service.wait_idle(DEADLINE_S), "the service never went idle"

    def replies(self, room: str = "dm") -> list[str]:
        return self.channel.texts(room, "reply")


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    made = World(tmp_path)
    await made.start()
    yield made
    await made.close()


@pytest.fixture
async def make_world(tmp_path: Path) -> AsyncIterator[Callable[..., World]]:
    """For tests that need other settings; the test starts them, teardown closes them."""
    counter = itertools.count(1)
    made: list[World] = []

    def make(**settings: Any) -> World:
        directory = tmp_path / f"world-{next(counter)}"
        directory.mkdir()
        made.append(World(directory, **settings))
        return made[-1]

    yield make
    for each in made:
        await each.close()


@contextlib.asynccontextmanager
async def running_replica(world: World, leases: LeaseStore) -> AsyncIterator[Replicas]:
    """``world`` started as one replica ("replica-a", a 30 s lease, polling every 0.05 s)
    on ``leases``, its group duties running; stopped, left and closed in that order."""
    made: list[Replicas] = []

    def attach(service: GatewayService) -> None:
        settings = HaSettings(enabled=True, lease_seconds=30.0, poll_seconds=0.05)
        channels = {world.channel.name: world.channel}
        made.append(
            Replicas(leases, service, channels, [], settings, 4, replica_id="replica-a")  # type: ignore[arg-type]
        )

    world.before_start = attach
    await world.start()
    [replicas] = made
    await replicas.start()
    try:
        yield replicas
    finally:
        await replicas.stop_listening()
        await world.stop()
        await replicas.leave()
        await world.close()
