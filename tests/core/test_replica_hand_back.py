"""A replica whose hand-back of a conversation fails keeps answering it.

One replica (``core/replicas/duties.py``) on the fast tier's real service and SQLite file: when a
conversation's lane empties the replica hands its claim back (``LeaseStore.unclaim``). If
that write fails (SQLite's "database is locked" past the busy timeout, a PostgreSQL
connection error), the database still names the replica the holder, so no replica may
claim the conversation; the replica must not forget it, or the conversation's next message
is never answered."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from gateway_bot.state.database import Database
from gateway_bot.state.leases_store import LeaseStore
from tests.core.conftest import DEADLINE_S, World, running_replica


class RefusingHandBacks(LeaseStore):
    """While ``down``, the state database refuses every hand-back, as SQLite does when
    another process holds the write lock past the busy timeout (a fault at the database
    boundary: really holding the lock would make every write of the replica wait that long,
    and the backend tries a locked write several times)."""

    def __init__(self, database: Database) -> None:
        super().__init__(database)
        self.down = True
        self.refused = asyncio.Event()

    async def unclaim(self, conversation_id: str, replica: str, token: int) -> bool:
        if self.down:
            self.refused.set()
            raise sqlite3.OperationalError("database is locked")
        return await super().unclaim(conversation_id, replica, token)


async def test_a_conversation_whose_hand_back_failed_is_still_answered_and_then_freed(
    tmp_path: Path,
) -> None:
    world = World(tmp_path)
    leases = RefusingHandBacks(world.store.database)
    async with running_replica(world, leases):
        first = await world.say("first question")
        assert (await world.reply(first)).text == "Echo: first question"
        async with asyncio.timeout(DEADLINE_S):
            await leases.refused.wait()  # the hand-back after the first answer failed

        # The next message comes while the database still refuses hand-backs.
        second = await world.say("second question")
        assert (await world.reply(second)).text == "Echo: second question", (
            "the conversation was left to nobody"
        )
        conversation = (await world.task(first)).conversation_id
        assert conversation is not None
        assert (await world.task(second)).conversation_id == conversation

        async def holder() -> object:
            row = await world.store.database.fetch_one(
                "SELECT replica FROM ha_conversation_claims WHERE conversation_id = ?",
                (conversation,),
            )
            assert row is not None, "the conversation was never claimed"
            return row[0]

        assert await holder() == "replica-a", "handed back while the database refused it"
        leases.down = False  # the blip passes
        async with asyncio.timeout(DEADLINE_S):
            while True:  # the claim handed back in the end
                if await holder() is None:
                    break
                await asyncio.sleep(0.01)
