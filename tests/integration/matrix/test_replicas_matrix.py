"""Two daemons (replicas) on one PostgreSQL state database with the same config, talking
Matrix to a real Synapse: the sync runs on one of them only, every message is answered
exactly once and in order per room, and a replica killed mid-task (kill -9) with the Matrix
listener leaves the listener and the task to the other; a holder only paused past its lease
wakes up to find its late reply refused (the claim's fencing token).

Matrix conversations run on the replica holding the Matrix listener (the channel
``SendsWhereItListens``: its login and device crypto live with the listener), so here the
survivor of a kill takes the listener and then the dead replica's conversations. The agent
and the deployment are tests/support/replica_fixtures.py's."""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gateway_bot.state.database import Database
from gateway_bot.state.leases_store import LeaseStore
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.replica_fixtures import Deployment, tasks_run, wait_for
from tests.support.synapse_fixtures import (
    Event,
    Human,
    MatrixAccount,
    SynapseServer,
    bot_text,
    membership,
    relation_of,
)

ROOMS = 10
FAILOVER_LEASE_S = 6.0
"""Long enough that the thirty messages' replica is not declared dead by a heartbeat late
under CI's load (with 3 s, a 2 s stall did it: its runs stopped and ran again, which the
test's counts of runs would then see), short enough for its two take-overs."""


class MatrixDeployment(Deployment):
    """The replicas' deployment with its bot account and Alice, who may use it."""

    bot: MatrixAccount
    alice: Human


@pytest.fixture
async def deployment(
    gateway: Any,
    meet: Any,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    postgres_url: str,
) -> AsyncIterator[MatrixDeployment]:
    alice = await meet("alice")
    bot = await synapse.register("bot")
    matrix = {
        "homeserver": synapse.base_url,
        "user_id": bot.user_id,
        "password": bot.password,
        "allowed_users": [alice.user_id],
    }
    made = MatrixDeployment(
        gateway, tmp_path, target_repo, fake_api, {"matrix": matrix}, postgres_url,
        max_concurrent_tasks=ROOMS, lease_seconds=FAILOVER_LEASE_S,
    )  # fmt: skip
    made.bot, made.alice = bot, alice
    yield made
    made.print_logs()


async def start_replica(deployment: Deployment) -> Any:
    return await asyncio.to_thread(deployment.start_replica)


async def rooms_joined(deployment: MatrixDeployment, count: int) -> list[str]:
    """Rooms Alice made with the bot, once it joined each (the listener accepts invites)."""
    alice, bot = deployment.alice, deployment.bot
    rooms = list(await asyncio.gather(*(alice.create_room([bot.user_id]) for _ in range(count))))
    for room in rooms:
        await alice.wait_for(room, membership(bot.user_id, "join"))
    return rooms


def bot_message(bot: str, msgtype: str) -> Any:
    """The bot's messages of one msgtype, edits left out."""

    def matches(event: Event) -> bool:
        content = event.get("content") or {}
        return (
            event.get("sender") == bot
            and event.get("type") == "m.room.message"
            and content.get("msgtype") == msgtype
            and relation_of(event).get("rel_type") != "m.replace"
        )

    return matches


async def seen_in(deployment: MatrixDeployment, room: str) -> tuple[list[str], int]:
    """From the room's whole history: the msg-C-N words the bot answered, in order, and how
    many acknowledgement notices it posted (their later edits not counted)."""
    text = bot_message(deployment.bot.user_id, "m.text")
    notice = bot_message(deployment.bot.user_id, "m.notice")
    answered, acknowledged = [], 0
    for event in await deployment.alice.history(room):
        if text(event) and (word := re.search(r"Echo: (msg-\d+-\d+)", event["content"]["body"])):
            answered.append(word.group(1))
        acknowledged += notice(event)
    return answered, acknowledged


async def what_the_bot_said(deployment: MatrixDeployment, room: str) -> list[tuple[str, str]]:
    """For a failure's message: the bot's posts in the room (msgtype, body), edits too."""
    return [
        (str(event["content"].get("msgtype")), str(event["content"].get("body"))[:80])
        for event in await deployment.alice.history(room)
        if event.get("sender") == deployment.bot.user_id and event.get("type") == "m.room.message"
    ]


async def answered_once_in_order(
    deployment: MatrixDeployment, rooms: list[str], turns: int
) -> None:
    """Once the last turn's answer is in every room: room N shows msg-N-0 .. msg-N-(turns-1)
    answered once each, in order, and one acknowledgement a message."""
    alice, bot = deployment.alice, deployment.bot
    last = turns - 1
    for number, room in enumerate(rooms):
        await alice.wait_for(room, bot_text(bot.user_id, rf"Echo: msg-{number}-{last}\b"), 120)
    for number, room in enumerate(rooms):
        expected = [f"msg-{number}-{turn}" for turn in range(turns)]
        assert await seen_in(deployment, room) == (expected, turns), (
            "each answered once, in the order asked; one acknowledgement a message",
            await what_the_bot_said(deployment, room),
            await asyncio.to_thread(deployment.tasks_of, room),
        )


def leases(url: str) -> dict[str, tuple[str, int]]:
    """Each lease's holder and fencing token, as the shared database has them."""
    with psycopg.connect(url) as connection:
        rows = connection.execute("SELECT name, holder, token FROM ha_leases").fetchall()
    return {name: (holder, token) for name, holder, token in rows}


async def bury(url: str, replica: str) -> None:
    """What another replica does to one whose heartbeat expired (``LeaseStore.bury``: its
    row gone, its claims free), done now: a live replica declared dead, as one whose
    heartbeat came late on a loaded machine is."""
    database = Database()
    await database.open(url)
    try:
        assert await LeaseStore(database).bury(replica, time.time() + 3600)
    finally:
        await database.close()


def notice_answering(bot: str, event_id: str) -> Any:
    """The bot's notice (an acknowledgement) in reply to the message ``event_id``."""
    notice = bot_message(bot, "m.notice")
    return lambda event: (
        notice(event)
        and (relation_of(event).get("m.in_reply_to") or {}).get("event_id") == event_id
    )


def replica_id(replica: Any) -> str:
    found = re.search(r"replica (\S+) joined", replica.stderr)
    assert found, replica.stderr
    return found.group(1)


def listener_holders(replicas: list[Any]) -> list[Any]:
    return [r for r in replicas if "lease listener:matrix: taken" in r.stderr]


async def test_two_replicas_answer_once_each_in_order_and_survive_kill_9_of_the_listener(
    deployment: MatrixDeployment, postgres_url: str
) -> None:
    alice, bot = deployment.alice, deployment.bot
    first = await start_replica(deployment)
    await asyncio.to_thread(
        wait_for, lambda: listener_holders([first]), "the Matrix listener's lease", first
    )
    second = await start_replica(deployment)
    rooms = await rooms_joined(deployment, ROOMS)

    # Thirty messages in ten rooms: the replica with the Matrix sync runs them all.
    for turn in range(3):
        for number, room in enumerate(rooms):
            await alice.say(room, f"please echo msg-{number}-{turn}")
    await answered_once_in_order(deployment, rooms, 3)
    runs = deployment.runs_of()
    for number in range(ROOMS):
        ran = [word for word in runs if word.startswith(f"msg-{number}-")]
        assert ran == [f"msg-{number}-{turn}" for turn in range(3)], "run once, in order"
    assert tasks_run(first, "matrix") == 30, "Matrix conversations run on the listener's replica"
    assert tasks_run(second, "matrix") == 0
    assert listener_holders([first, second]) == [first], "the sync ran on one replica only"
    assert "matrix: logged in" not in second.stderr, "the other replica never used the bot"

    # kill -9 of the listener's replica mid-task: the other takes the listener, then the
    # interrupted conversation, and answers what was said meanwhile.
    slow_room, other_room = rooms[0], rooms[1]
    await alice.say(slow_room, "SLOW msg-0-3")
    await asyncio.to_thread(
        wait_for, deployment.started.exists, "the slow task to start on the holder", first
    )
    await asyncio.to_thread(first.kill)
    await alice.say(other_room, "meanwhile msg-1-3")
    deployment.gate.touch()  # the re-run must not wait

    await alice.wait_for(slow_room, bot_text(bot.user_id, r"Echo: msg-0-3\b"), 120)
    await alice.wait_for(other_room, bot_text(bot.user_id, r"Echo: msg-1-3\b"), 120)
    await alice.say(slow_room, "then msg-0-4")
    await alice.wait_for(slow_room, bot_text(bot.user_id, r"Echo: msg-0-4\b"), 120)

    words = [f"msg-0-{turn}" for turn in range(5)]
    assert await seen_in(deployment, slow_room) == (words, 5), "each once, one ack each"
    words = [f"msg-1-{turn}" for turn in range(4)]
    assert await seen_in(deployment, other_room) == (words, 4), "the message said meanwhile"
    late = deployment.runs_of()[len(runs) :]
    assert sorted(late) == ["msg-0-3", "msg-0-3", "msg-0-4", "msg-1-3"], (
        "the interrupted task ran again, every other task once"
    )
    assert tasks_run(second, "matrix") == 3
    assert listener_holders([second]) == [second]
    assert re.search(rf"replica {replica_id(first)} missed its heartbeat", second.stderr)
    held = await asyncio.to_thread(leases, postgres_url)
    assert held["listener:matrix"] == (replica_id(second), 2), "taken over once, by the survivor"

    # A holder only paused (SIGSTOP) past its lease mid-task: a third replica takes the
    # listener and re-runs the task; the paused one wakes up with its own reply, which the
    # claim's fencing token refuses: the room shows one answer.
    third = await start_replica(deployment)
    deployment.gate.unlink()
    deployment.started.unlink()
    await alice.say(slow_room, "SLOW msg-0-5")
    await asyncio.to_thread(
        wait_for, deployment.started.exists, "the slow task to start on the holder", second
    )
    second.process.send_signal(signal.SIGSTOP)
    try:
        await asyncio.to_thread(
            wait_for,
            lambda: deployment.runs_of().count("msg-0-5") == 2,
            "the third replica to take the listener and run the task again",
            third,
        )
        deployment.gate.touch()
        await alice.wait_for(slow_room, bot_text(bot.user_id, r"Echo: msg-0-5\b"), 120)
    finally:
        second.process.send_signal(signal.SIGCONT)
    await asyncio.to_thread(
        wait_for,
        lambda: "its reply is refused" in second.stderr,
        "the woken holder's late reply to be refused",
        second,
    )
    await asyncio.to_thread(
        wait_for,
        lambda: "lease listener:matrix: stopping its duty" in second.stderr,
        "the woken holder to stop its Matrix listener",
        second,
    )
    await alice.say(slow_room, "then msg-0-6")
    await alice.wait_for(slow_room, bot_text(bot.user_id, r"Echo: msg-0-6\b"), 120)
    words = [f"msg-0-{turn}" for turn in range(7)]
    assert await seen_in(deployment, slow_room) == (words, 7), "the late reply was not sent"
    assert listener_holders([third]) == [third]
    held = await asyncio.to_thread(leases, postgres_url)
    assert held["listener:matrix"] == (replica_id(third), 3), "taken over from the paused one"


async def test_a_live_replica_declared_dead_lets_its_claims_go_and_answers_each_once_in_order(
    deployment: MatrixDeployment, postgres_url: str
) -> None:
    """The listener's replica is declared dead while its runs are under way and a message
    waits behind each (its heartbeat was late: CI at load, 2026-11-29). It learns so, lets
    every claim go (its queued tasks leave their lanes, its runs stop unanswered, and a
    claim it took back before it knew is freed), joins again and claims them anew: every
    message is answered once and in the order asked, none left to nobody."""
    alice, bot = deployment.alice, deployment.bot
    first = await start_replica(deployment)
    await asyncio.to_thread(
        wait_for, lambda: listener_holders([first]), "the Matrix listener's lease", first
    )
    second = await start_replica(deployment)
    rooms = await rooms_joined(deployment, 3)
    for number, room in enumerate(rooms):
        await alice.say(room, f"SLOW msg-{number}-0")
    await asyncio.to_thread(wait_for, deployment.started.exists, "a slow run to start", first)
    for number, room in enumerate(rooms):
        said = await alice.say(room, f"please echo msg-{number}-1")
        await alice.wait_for(room, notice_answering(bot.user_id, said), 60)  # queued there

    await bury(postgres_url, replica_id(first))
    await asyncio.to_thread(
        wait_for, lambda: "was declared dead" in first.stderr, "it learns it was", first
    )
    deployment.gate.touch()
    for number, room in enumerate(rooms):
        await alice.say(room, f"please echo msg-{number}-2")
    await answered_once_in_order(deployment, rooms, 3)
    for number in range(len(rooms)):
        expected = [f"msg-{number}-{turn}" for turn in range(3)]
        ran = [word for word in deployment.runs_of() if word.startswith(f"msg-{number}-")]
        assert [w for i, w in enumerate(ran) if i == 0 or ran[i - 1] != w] == expected, (
            "run in order (a stopped run again, right after)"
        )
    assert tasks_run(second, "matrix") == 0, "Matrix conversations stay with the listener"
    held = await asyncio.to_thread(leases, postgres_url)
    assert held["listener:matrix"] == (replica_id(first), 1), "the listener never moved"
