"""Matrix acknowledgement latency on a real Synapse, beside its floors, all in one run.

A person (matrix-nio, with a crypto store as Element has) sends; the time until their other
device *sees* the answer is measured, for:

* one hop: the message seen by a second person's client (the homeserver's own floor);
* minimal bot: ``bench/minimal_matrix_bot.py`` in a room of its own, a nio client that
  replies the moment it syncs a message (two hops, no store, no work);
* the bot, plain room: the real ``gateway-bot run`` (trivial agent), its "Working on it";
* the bot, encrypted room: the same in an encrypted DM (encrypt, decrypt on both sides);
* with ``baseline`` (``--baseline DIR``): another checkout's daemon in a plain room of its
  own, e.g. the code before a change, so before and after share one run's load.

Every observer long-polls /sync in a loop of its own (a client that is open), and stamps
each event when its sync returns; the sender is a separate device that never syncs during a
measurement, so the measured path is the one a user waits on. The rounds interleave the four
cases so load on the machine hits them alike, and each round waits for the bot's final reply
(untimed) so nothing queues.

Synapse stamps ``origin_server_ts`` on both the message and the answer (same host clock), so
each sample splits into: sender -> homeserver stored, homeserver -> answer stored (the bot's
wake-up and work), answer stored -> seen by the observer.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conftest import make_repo
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.synapse_fixtures import (
    Event,
    Human,
    SynapseServer,
    bot_text,
    matrix_config,
    membership,
    relation_of,
)

from bench import trace_report
from bench.daemon import Daemon, spawn_floor, trivial_agent
from bench.report import Section, info_row, ratio_row

_SETTLE_S = 0.5
"""Untimed pause after every case. Without it the encrypted case, which follows the plain
one, started while the daemon and Synapse were still finishing the plain room's task (the
task's final commits, the progress record's removal, typing off): measured 2026-11-26 at
~150 ms of its p50, a cost of the order of the cases and not of encryption."""


@dataclass
class _Waiter:
    room: str
    matches: Callable[[Event], bool]
    found: asyncio.Future[tuple[float, Event]]


@dataclass
class Observer:
    """A client left open: syncs in a loop, stamps events as they arrive."""

    human: Human
    waiters: list[_Waiter] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    errors: list[str] = field(default_factory=list)

    def start(self) -> None:
        self.task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    def expect(self, room: str, matches: Callable[[Event], bool]) -> asyncio.Future[Any]:
        future: asyncio.Future[tuple[float, Event]] = asyncio.get_running_loop().create_future()
        self.waiters.append(_Waiter(room, matches, future))
        return future

    async def _loop(self) -> None:
        while True:
            before = {room: len(events) for room, events in self.human.seen.items()}
            try:
                await self.human.sync(30000)
            except Exception as exc:  # a client stays open through a failed sync
                self.errors.append(repr(exc))
                await asyncio.sleep(0.2)
                continue
            now = time.perf_counter()
            for room, events in self.human.seen.items():
                for event in events[before.get(room, 0) :]:
                    for waiter in list(self.waiters):
                        if waiter.room == room and waiter.matches(event):
                            self.waiters.remove(waiter)
                            if not waiter.found.done():
                                waiter.found.set_result((now, event))


def _replying_to(sender: str, event_id_box: list[str]) -> Callable[[Event], bool]:
    """The first message from ``sender`` replying to the event id put in the box later."""
    return lambda e: (
        e.get("sender") == sender
        and e.get("type") == "m.room.message"
        and bool(event_id_box)
        and relation_of(e).get("m.in_reply_to", {}).get("event_id") == event_id_box[0]
    )


@dataclass
class Sample:
    total_ms: float
    to_server_ms: float
    answer_ms: float
    """Homeserver stored the message -> stored the answer (the answering side's share)."""
    to_observer_ms: float


async def _measure(
    sender: Human, observer: Observer, room: str, text: str, answered_by: str | None
) -> Sample:
    box: list[str] = []
    if answered_by is None:  # one hop: the message itself, seen by someone else
        seen = observer.expect(room, lambda e: bool(box) and e.get("event_id") == box[0])
    else:
        seen = observer.expect(room, _replying_to(answered_by, box))
    wall_sent = time.time()
    started = time.perf_counter()
    box.append(await sender.say(room, text))
    arrived, event = await asyncio.wait_for(seen, 60)
    total = (arrived - started) * 1000
    answer_ts = float(event.get("origin_server_ts", 0)) / 1000
    if answered_by is None:
        to_server = (answer_ts - wall_sent) * 1000
        return Sample(total, to_server, 0.0, total - to_server)
    original = await sender.client.room_get_event(room, box[0])
    message_ts = float(original.event.source.get("origin_server_ts", 0)) / 1000
    to_server = (message_ts - wall_sent) * 1000
    answer = (answer_ts - message_ts) * 1000
    return Sample(total, to_server, answer, total - to_server - answer)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def _summary(samples: list[Sample]) -> dict[str, Any]:
    totals = [s.total_ms for s in samples]
    return {
        "n": len(samples),
        "p50_ms": statistics.median(totals),
        "p99_ms": percentile(totals, 0.99),
        "mean_ms": statistics.fmean(totals),
        "median_split_ms": {
            "sender_to_homeserver": statistics.median(s.to_server_ms for s in samples),
            "homeserver_to_answer_stored": statistics.median(s.answer_ms for s in samples),
            "answer_to_observer": statistics.median(s.to_observer_ms for s in samples),
        },
        "samples_ms": [round(t, 2) for t in totals],
        "samples_split_ms": [
            [round(s.to_server_ms, 1), round(s.answer_ms, 1), round(s.to_observer_ms, 1)]
            for s in samples
        ],
    }


async def _bench(rounds: int, root: Path, trace: bool, baseline: Path | None) -> Section:
    section = Section("matrix acknowledgement")
    server = SynapseServer(root / "synapse")
    await asyncio.to_thread(server.start)
    api = FakeAnthropic()
    api.start()
    daemon: Daemon | None = None
    before: Daemon | None = None
    minimal: subprocess.Popen[str] | None = None
    people: list[Human] = []
    observers: list[Observer] = []
    try:
        alice = Human(server, await server.register("alice"), root / "alice-a")
        people.append(alice)
        await alice.sync(0)
        alice_b = await alice.new_device(root / "alice-b")
        carol = Human(server, await server.register("carol"))
        people += [alice_b, carol]
        await carol.sync(0)
        bot = await server.register("bot")
        tiny = await server.register("tiny")
        bots = [bot.user_id]

        hop_room = await alice.create_room([carol.user_id], name="hop")
        await carol.join(hop_room)
        tiny_room = await alice.create_room([tiny.user_id], name="minimal")
        plain = await alice.create_room([bot.user_id], name="plain")
        encrypted = await alice.create_room([bot.user_id], encrypted=True, direct=True)

        minimal = await asyncio.to_thread(
            spawn_floor, "bench.minimal_matrix_bot", server.base_url,
            tiny.user_id, tiny.device_id, tiny.access_token,
        )  # fmt: skip

        config = matrix_config(
            root, make_repo(root / "repo"), api, server, bot, [alice.user_id],
            e2ee={"pickle_key": "bench-pickle-key"},
            sections={"agent": trivial_agent()},
        )  # fmt: skip
        trace_file = root / "trace.jsonl" if trace else None
        daemon = Daemon(config, root / "daemon.log", trace_file)
        joins = [(plain, bot.user_id), (encrypted, bot.user_id), (tiny_room, tiny.user_id)]
        before_case: list[tuple[str, str, str]] = []
        if baseline is not None:
            old = await server.register("before")
            old_room = await alice.create_room([old.user_id], name="plain, before")
            (root / "before").mkdir()
            old_config = matrix_config(
                root / "before", make_repo(root / "before-repo"), api, server, old,
                [alice.user_id], e2ee={"pickle_key": "bench-pickle-key"},
                sections={"agent": trivial_agent()},
            )  # fmt: skip
            before = Daemon(old_config, root / "before.log", checkout=baseline)
            joins.append((old_room, old.user_id))
            bots.append(old.user_id)
            before_case.append(("before: bot, plain room", old_room, old.user_id))
        for room, member in joins:
            await alice.wait_for(room, membership(member, "join"))
        await alice_b.sync(0)

        for observer_human in (alice_b, carol):
            observers.append(Observer(observer_human))
        watch_b, watch_carol = observers
        for observer in observers:
            observer.start()

        cases: list[tuple[str, Observer, str, str | None]] = [
            ("one hop", watch_carol, hop_room, None),
            ("minimal bot", watch_b, tiny_room, tiny.user_id),
            ("bot, plain room", watch_b, plain, bot.user_id),
            *((name, watch_b, room, user) for name, room, user in before_case),
            ("bot, encrypted room", watch_b, encrypted, bot.user_id),
        ]
        results: dict[str, list[Sample]] = {name: [] for name, *_ in cases}
        unanswered = dict.fromkeys(results, 0)
        warmup = 3
        for number in range(rounds + warmup):
            order = list(cases)
            if before_case and number % 2:  # before and after take turns going first
                order[2], order[3] = order[3], order[2]
            for name, observer, room, answerer in order:
                text = f"bench {number} {name}"
                done = None
                if answerer in bots:
                    done = observer.expect(room, bot_text(str(answerer), r"bench-done"))
                try:
                    sample = await _measure(alice, observer, room, text, answerer)
                    if done is not None:
                        await asyncio.wait_for(done, 60)  # the task is over: nothing queues
                except TimeoutError:
                    unanswered[name] += 1  # counted, reported; the run goes on
                    continue
                finally:
                    await alice.key_chores()
                    # The bot's bookkeeping after its final reply (the task's last commits,
                    # typing off) must not overlap the next case: each case starts idle.
                    await asyncio.sleep(_SETTLE_S)
                if number >= warmup:
                    results[name].append(sample)
        summary = {name: _summary(samples) for name, samples in results.items()}
        section.details = {
            "rounds": rounds, "cases": summary, "unanswered_within_60s": unanswered,
            "observer_sync_errors": [e for o in observers for e in o.errors][:20],
        }  # fmt: skip
        if trace_file is not None:
            rows = trace_report.breakdown(trace_file, "MatrixApi.sync")
            section.details["trace"] = rows
            print(trace_report.render(rows))
        hop, floor = summary["one hop"], summary["minimal bot"]
        bot_plain, bot_e2ee = summary["bot, plain room"], summary["bot, encrypted room"]
        section.rows = [
            info_row("matrix one hop p50 (floor)", hop["p50_ms"], "ms"),
            ratio_row("matrix ack p50, plain room", bot_plain["p50_ms"], floor["p50_ms"],
                      "minimal bot p50", 1.15, "ms"),
            ratio_row("matrix ack p99, plain room", bot_plain["p99_ms"], floor["p99_ms"],
                      "minimal bot p99", 1.5, "ms"),
            ratio_row("matrix ack p50, encrypted vs plain", bot_e2ee["p50_ms"],
                      bot_plain["p50_ms"], "bot plain p50", 1.1, "ms"),
            info_row("matrix ack p99, encrypted room", bot_e2ee["p99_ms"], "ms",
                     f"{bot_e2ee['p99_ms'] / bot_plain['p99_ms']:.2f}x the plain room's p99"),
        ]  # fmt: skip
        if before_case:
            old_plain = summary["before: bot, plain room"]
            section.rows += [
                ratio_row("before: matrix ack p50, plain room", old_plain["p50_ms"],
                          floor["p50_ms"], "minimal bot p50", 1.15, "ms"),
                ratio_row("before: matrix ack p99, plain room", old_plain["p99_ms"],
                          floor["p99_ms"], "minimal bot p99", 1.5, "ms"),
                info_row("matrix ack p50, plain room, after/before",
                         bot_plain["p50_ms"] / old_plain["p50_ms"], "x"),
            ]  # fmt: skip
        return section
    finally:
        for observer in observers:
            await observer.stop()
        for person in people:
            await person.close()
        if minimal is not None:
            minimal.kill()
            minimal.wait(10)
        for running in (daemon, before):
            if running is not None:
                running.stop()
        api.stop()
        await asyncio.to_thread(server.stop)


def run(rounds: int, root: Path, *, trace: bool = False, baseline: Path | None = None) -> Section:
    return asyncio.run(_bench(rounds, root, trace, baseline))
