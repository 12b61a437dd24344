"""A replica declared dead while alive, with a take-up under way (decision 0134).

One replica (``core/replicas/duties.py``) on the fast tier's real service and SQLite file.
It claims a conversation for its first message and starts taking it up; the database is
slow to answer the take-up's read of the pending tasks. Meanwhile another replica buries it
(its heartbeat was late). It lets every claim go and joins again; the take-up still under
way must then act on nothing and hand nothing back, and the conversation is claimed again
only once that take-up has ended: two take-ups of one conversation at once ran its tasks
before the second one's recovery and handed back the second claim."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from gateway_bot.state.database import Database
from gateway_bot.state.leases_store import LeaseStore, ReplicaRow
from tests.core.conftest import DEADLINE_S, World, running_replica


class SlowTakeUps(LeaseStore):
    """The database answers a take-up's read of the pending tasks once ``answer`` is set
    (a slow answer on a loaded machine); every claim made and every dispatch round's read
    of the group are counted, and a rejoin is signalled."""

    def __init__(self, database: Database) -> None:
        super().__init__(database)
        self.answer = asyncio.Event()
        self.waiting = asyncio.Event()
        self.rejoined = asyncio.Event()
        self.claimed: list[tuple[str, int]] = []
        self.rounds = 0

    async def pending_of(self, replica: str) -> list[tuple[str, str]]:
        current = asyncio.current_task()
        if current is not None and current.get_name().startswith("take-up-"):
            self.waiting.set()
            await self.answer.wait()
        return await super().pending_of(replica)

    async def claim(self, conversation_id: str, replica: str, now: float) -> int | None:
        token = await super().claim(conversation_id, replica, now)
        if token is not None:
            self.claimed.append((conversation_id, token))
        return token

    async def rejoin(self, replica: str, host: str, pid: int, now: float, lease_s: float) -> None:
        await super().rejoin(replica, host, pid, now, lease_s)
        self.rejoined.set()

    async def replicas(self) -> list[ReplicaRow]:
        self.rounds += 1
        return await super().replicas()


async def test_a_take_up_under_way_at_a_rejoin_ends_before_the_conversation_is_claimed_again(
    tmp_path: Path,
) -> None:
    world = World(tmp_path)
    leases = SlowTakeUps(world.store.database)
    async with running_replica(world, leases):
        first = await world.say("first question")
        async with asyncio.timeout(DEADLINE_S):
            await leases.waiting.wait()  # its take-up waits for the database
        conversation = (await world.task(first)).conversation_id
        assert leases.claimed == [(conversation, 1)]

        assert await leases.bury("replica-a", time.time() + 3600), "another replica's burial"

        async with asyncio.timeout(DEADLINE_S):
            await leases.rejoined.wait()
        rounds = leases.rounds
        await world.until(lambda: leases.rounds >= rounds + 3, "three rounds after the rejoin")
        assert leases.claimed == [(conversation, 1)], (
            "claimed again while the take-up of the claim it let go was under way"
        )

        leases.answer.set()
        assert (await world.reply(first)).text == "Echo: first question"
        assert leases.claimed == [(conversation, 1), (conversation, 2)]
        assert [run.body for run in world.agent.runs] == ["first question"], "run once"
        second = await world.say("second question")
        assert (await world.reply(second)).text == "Echo: second question"
        assert [text for text in world.replies() if text.startswith("Echo:")] == [
            "Echo: first question",
            "Echo: second question",
        ], "each answered once"
