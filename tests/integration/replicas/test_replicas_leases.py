"""Two replicas' handles on one state database (two connections to one SQLite file, as two
daemons have): leases, conversation claims and fencing, without a daemon.

What a user relies on: a listener never runs on two replicas at once (a lease's holder
stops before another may start), a replica that lost its claim on a conversation (it
was declared dead, then woke up) cannot record, hence never sends, a late reply, and a
task waiting for an action approval sees a decision another replica recorded."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway_bot.cli.status_sections import group_text
from gateway_bot.config.access import AccessSettings
from gateway_bot.core.actions.approvals import ActionApprovals, ActionDecision, ActionRequest
from gateway_bot.core.replicas.lease_keeper import LeaseKeeper
from gateway_bot.domain.lifecycle import TaskState
from gateway_bot.domain.messages import InboundMessage, RawMessage, Reply
from gateway_bot.state.action_approvals_store import SqlActionApprovals
from gateway_bot.state.database import Database
from gateway_bot.state.leases_store import LeaseStore, read_group
from gateway_bot.state.sql_store import SqlStore

pytestmark = pytest.mark.slow

LEASE_S = 1.5


@pytest.fixture
async def two_handles(tmp_path: Path) -> AsyncIterator[tuple[SqlStore, SqlStore]]:
    first = SqlStore(tmp_path / "state.db")
    await first.open()
    second = SqlStore(tmp_path / "state.db")
    await second.open()
    yield first, second
    await first.close()
    await second.close()


async def executing_task(store: SqlStore, text: str) -> tuple[str, str]:
    """A message routed to a new conversation and running: (task id, conversation id)."""
    raw = RawMessage("slack", f"m-{text}", "alice", {"text": text}, time.time())
    task_id, _ = await store.accept_inbound(raw)
    await store.transition(task_id, TaskState.AUTHENTICATING)
    conversation = await store.create_conversation("slack", f"thread-{text}", None)
    parsed = InboundMessage(
        "slack", raw.message_id, "slack:alice", "alice", text, f"thread-{text}", raw.received_at
    )
    await store.transition(
        task_id, TaskState.PENDING, conversation_id=conversation.id, parsed=parsed
    )
    await store.transition(task_id, TaskState.EXECUTING)
    return task_id, conversation.id


async def test_a_replica_declared_dead_cannot_record_its_late_reply(
    two_handles: tuple[SqlStore, SqlStore],
) -> None:
    store_a, store_b = two_handles
    a, b = LeaseStore(store_a.database), LeaseStore(store_b.database)
    now = time.time()
    await a.register("replica-a", "host", 1, now, LEASE_S)
    await b.register("replica-b", "host", 2, now, LEASE_S)
    task_id, conversation_id = await executing_task(store_a, "question")
    token_a = await a.claim(conversation_id, "replica-a", now)
    assert token_a is not None
    assert await b.claim(conversation_id, "replica-b", now) is None, "claimed twice"
    assert await b.claimable(10) == [], "a claimed conversation is nobody else's work"

    # replica-a stops heartbeating; once its time is up, replica-b buries it and takes over.
    later = now + LEASE_S + 1
    assert not await b.bury("replica-a", now), "buried while its heartbeat was valid"
    assert await b.bury("replica-a", later)
    assert not await a.bury("replica-a", later), "buried twice"
    assert await b.claimable(10) == [conversation_id]
    assert await b.claimable(10, ["slack"]) == [], "a channel that sends only where it listens"
    token_b = await b.claim(conversation_id, "replica-b", later)
    assert token_b is not None
    assert token_b > token_a

    # replica-a wakes up with its reply: refused, and the task keeps no reply of its.
    late = Reply(text="the stale holder's answer")
    assert not await a.record_reply_fenced(task_id, late, conversation_id, "replica-a", token_a)
    assert (await store_b.get_task(task_id)).reply is None
    assert not await a.heartbeat("replica-a", later, LEASE_S), "it learns it was declared dead"

    fresh = Reply(text="the new holder's answer")
    assert await b.record_reply_fenced(task_id, fresh, conversation_id, "replica-b", token_b)
    stored = (await store_a.get_task(task_id)).reply
    assert stored is not None
    assert stored.text == "the new holder's answer"


async def test_a_lease_is_taken_only_when_expired_and_each_take_over_raises_the_token(
    two_handles: tuple[SqlStore, SqlStore],
) -> None:
    store_a, store_b = two_handles
    a, b = LeaseStore(store_a.database), LeaseStore(store_b.database)
    now = time.time()
    first = await a.acquire("listener:slack", "replica-a", now, LEASE_S)
    assert first is not None
    assert await b.acquire("listener:slack", "replica-b", now + LEASE_S / 2, LEASE_S) is None
    assert await a.renew("listener:slack", "replica-a", first, now + 1, LEASE_S)
    assert await b.acquire("listener:slack", "replica-b", now + LEASE_S, LEASE_S) is None, (
        "a renewed lease lasts from its renewal"
    )
    after = now + 1 + LEASE_S + 0.01
    second = await b.acquire("listener:slack", "replica-b", after, LEASE_S)
    assert second == first + 1
    assert not await a.renew("listener:slack", "replica-a", first, after, LEASE_S)
    assert not await a.holds("listener:slack", "replica-a", first, after)
    assert await b.holds("listener:slack", "replica-b", second, after)
    [lease] = await a.leases()
    assert (lease.holder, lease.token) == ("replica-b", second)
    group = await read_group(store_a.database)
    assert group is not None
    table = "\n".join(group_text(group, after))
    assert re.search(r"listener:slack\s+replica-b\s+2\s+in \d+s", table), table


async def test_a_holder_that_cannot_renew_stops_before_another_replica_starts(
    two_handles: tuple[SqlStore, SqlStore],
) -> None:
    """The database stops answering replica-a (its connection is gone): it stops its
    listener on its own before the lease's recorded expiry; replica-b starts only after."""
    store_a, store_b = two_handles
    events: list[tuple[str, float]] = []
    started_a, started_b = asyncio.Event(), asyncio.Event()
    stopped_a = asyncio.Event()

    async def start_a() -> None:
        events.append(("a started", time.time()))
        started_a.set()

    async def stop_a() -> None:
        events.append(("a stopped", time.time()))
        stopped_a.set()

    async def start_b() -> None:
        events.append(("b started", time.time()))
        started_b.set()

    async def nothing() -> None:
        return None

    leases_b = LeaseStore(store_b.database)
    leases_a = ExpiryRecordingLeases(store_a.database)
    keeper_a = LeaseKeeper("listener:slack", leases_a, "a", LEASE_S, start=start_a, stop=stop_a)
    keeper_b = LeaseKeeper("listener:slack", leases_b, "b", LEASE_S, start=start_b, stop=nothing)
    keeper_a.start()
    async with asyncio.timeout(30):
        await started_a.wait()
    keeper_b.start()
    await asyncio.sleep(LEASE_S)  # a few of a's renewals, none of b's attempts succeeding
    assert not keeper_b.held, "taken from a live holder"
    [lease] = await leases_b.leases()
    await store_a.close()  # a's renewals fail from now on
    async with asyncio.timeout(30):
        await stopped_a.wait()
        await started_b.wait()
    [taken] = await leases_b.leases()
    await keeper_a.close(release=False)
    await keeper_b.close()

    names = [name for name, _ in events]
    assert names == ["a started", "a stopped", "b started"]
    a_stopped_at, b_started_at = events[1][1], events[2][1]
    a_valid_until = max(leases_a.expiries)  # what a's last successful write recorded
    assert a_stopped_at < a_valid_until <= taken.acquired_at <= b_started_at
    assert taken.token == lease.token + 1


class ExpiryRecordingLeases(LeaseStore):
    """Remembers the expiry each successful take or renewal wrote."""

    def __init__(self, database: Database) -> None:
        super().__init__(database)
        self.expiries: list[float] = []

    async def acquire(self, name: str, holder: str, now: float, lease_s: float) -> int | None:
        token = await super().acquire(name, holder, now, lease_s)
        if token is not None:
            self.expiries.append(now + lease_s)
        return token

    async def renew(self, name: str, holder: str, token: int, now: float, lease_s: float) -> bool:
        renewed = await super().renew(name, holder, token, now, lease_s)
        if renewed:
            self.expiries.append(now + lease_s)
        return renewed


async def test_a_request_waiting_on_one_replica_sees_the_decision_another_recorded(
    two_handles: tuple[SqlStore, SqlStore],
) -> None:
    """Replica a runs the task and waits for an action approval; the press reaches replica
    b (its listener's), which records it in the shared row: a's request is allowed, and a
    denial recorded by b reaches a's next request the same way. The second is the asker's
    own press before any card was recorded (no channel here posts one; a press can also beat
    the card's record): it counts, in the asker's channel."""
    store_a, store_b = two_handles
    access = AccessSettings.model_validate({"owners": {"slack": ["owner"]}})
    asking = ActionApprovals(SqlActionApprovals(store_a.database), store_a, {}, access)
    deciding = ActionApprovals(SqlActionApprovals(store_b.database), store_b, {}, access)
    await asking.records.open()
    asking.watch_shared(0.05)
    task_id, conversation_id = await executing_task(store_a, "push it")

    async def ask_and_decide(who: str, name: str, choice: str, reason: str) -> ActionDecision:
        request = ActionRequest(
            conversation_id, task_id, "tool", "git push", "$ git push", "Bash: ask", "push"
        )
        asked = asyncio.Event()

        async def on_waiting(task: str, what: str | None) -> None:
            if what is not None:
                asked.set()

        asking.on_waiting = on_waiting
        waiting = asyncio.create_task(asking.ask(request))
        async with asyncio.timeout(30):
            await asked.wait()
        [record] = await deciding.records.pending()
        said = await deciding.decide("slack", who, name, record.code, choice, reason)
        assert said is not None
        assert said.startswith(("Allowed", "Denied")), said
        async with asyncio.timeout(30):
            return await waiting

    allowed = await ask_and_decide("owner", "Olivia", "once", "")
    assert (allowed.allowed, allowed.reason, allowed.decided_by) == (
        True,
        "allowed by Olivia",
        "Olivia",
    )
    denied = await ask_and_decide("slack:alice", "Alice", "deny", "not today")
    assert (denied.allowed, denied.reason) == (False, "denied by Alice: not today")


async def test_a_question_waiting_on_one_replica_is_answered_by_a_message_heard_on_another(
    two_handles: tuple[SqlStore, SqlStore],
) -> None:
    """The agent's question waits on replica a; Alice's next message in the conversation is
    heard by replica b (its listener's) and answers it. When b takes the conversation over
    from a (a was declared dead), a question a left pending is closed, so it cannot swallow
    the message meant for the re-run's question."""
    store_a, store_b = two_handles
    access = AccessSettings.model_validate({})
    asking = ActionApprovals(SqlActionApprovals(store_a.database), store_a, {}, access)
    hearing = ActionApprovals(SqlActionApprovals(store_b.database), store_b, {}, access)
    await asking.records.open()
    asking.watch_shared(0.05)
    hearing.watch_shared(0.05)
    task_id, conversation_id = await executing_task(store_a, "which branch")
    question = ActionRequest(
        conversation_id, task_id, "question", "Which branch?", "", "question", "q",
        options=("main", "dev"),
    )  # fmt: skip
    parsed = (await store_a.get_task(task_id)).parsed
    assert parsed is not None
    reply = dataclasses.replace(parsed, message_id="m-answer", body="2")

    waiting = asyncio.create_task(asking.ask(question))
    asked = await pending_question(hearing, conversation_id)
    assert await hearing.answer_reply(conversation_id, reply) == f"Answered {asked}: dev"
    async with asyncio.timeout(30):
        answered = await waiting
    assert (answered.allowed, answered.answer) == (True, "dev")

    left = asyncio.create_task(asking.ask(question))
    await pending_question(hearing, conversation_id)
    await hearing.abandon_in(conversation_id)
    async with asyncio.timeout(30):
        gone = await left
    assert (gone.allowed, gone.reason) == (False, "abandoned")
    assert await hearing.answer_reply(conversation_id, reply) is None, "a message, not an answer"


async def pending_question(approvals: ActionApprovals, conversation_id: str) -> str:
    """The code of the question pending in the conversation, once another handle wrote it."""
    async with asyncio.timeout(30):
        while True:
            found = await approvals.records.pending_in(conversation_id, "question")
            if found:
                return found[0].code
            await asyncio.sleep(0.02)
