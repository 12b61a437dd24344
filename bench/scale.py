"""Scale: tasks per second through the core, and the daemon's memory with many conversations.

* Throughput: the real GatewayService, scheduler and SQLite store (on this machine's disk,
  ``synchronous=FULL`` as in production) with the core tests' in-memory channel and echo
  agent (tests/core: ``World``), so what is timed is the core alone: N messages, one per
  conversation, submitted at once; time until every reply is sent; at concurrency 1, 4, 16
  (``execution.max_concurrent_tasks``).
* Daemon RSS: the real ``gateway-bot run`` (Slack Socket Mode on tests/support/fake_slack.py, host
  sandbox, trivial agent) after N conversations (one thread each) were answered; VmRSS of
  the daemon process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from tests.conftest import make_repo, write_config
from tests.core.conftest import World
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import APP_TOKEN, BOT_TOKEN, TEAM, FakeSlack

from bench.daemon import Daemon, trivial_agent
from bench.report import Section, budget_row, info_row
from bench.restart_recovery import answer_counts
from gateway_bot.core.service import SWEEP_INTERVAL_S
from gateway_bot.state.database import Database

ALICE, DM = "U0ALICE", "D0ALICE"


@contextlib.contextmanager
def _counting_commits() -> Iterator[dict[str, int]]:
    """Count the store's commits (flushed, and not) while the core runs."""
    counts = {"durable": 0, "relaxed": 0}
    write, transaction = Database.write, Database.transaction

    async def counted_write(
        self: Database, sql: str, params: Any = (), *, durable: bool = True
    ) -> int:
        counts["durable" if durable else "relaxed"] += 1
        return await write(self, sql, params, durable=durable)

    @contextlib.asynccontextmanager
    async def counted_transaction(self: Database, *, durable: bool = True) -> AsyncIterator[Any]:
        counts["durable" if durable else "relaxed"] += 1
        async with transaction(self, durable=durable) as connection:
            yield connection

    flush = Database.flush

    async def counted_flush(self: Database) -> None:
        counts["durable"] += 1  # a relaxed commit made durable (``accept_inbound``)
        counts["relaxed"] -= 1
        await flush(self)

    Database.flush = counted_flush  # type: ignore[method-assign]
    Database.write = counted_write  # type: ignore[method-assign]
    Database.transaction = counted_transaction  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        Database.write = write  # type: ignore[method-assign]
        Database.flush = flush  # type: ignore[method-assign]
        Database.transaction = transaction  # type: ignore[method-assign]


def fsync_commit_ms(directory: Path, commits: int = 100) -> float:
    """One small WAL commit with synchronous=FULL on this disk, in ms (median-free mean)."""
    path = directory / "fsync-probe.db"
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute("CREATE TABLE t (x)")
        started = time.perf_counter()
        for number in range(commits):
            connection.execute("INSERT INTO t VALUES (?)", (number,))
        return (time.perf_counter() - started) / commits * 1000
    finally:
        connection.close()
        os.unlink(path)


async def _throughput(root: Path, tasks: int, concurrency: int) -> tuple[float, float]:
    """Tasks per second, and disk flushes per task (group commit: shared by the commits
    waiting at the time)."""
    world = World(
        root, max_concurrent=concurrency, max_pending=tasks, sweep_interval_s=SWEEP_INTERVAL_S
    )
    await world.start()
    try:
        channel = world.channel
        started = time.perf_counter()
        await asyncio.gather(
            *(world.say(f"task {number}", room=f"room{number}") for number in range(tasks))
        )
        await world.until(
            lambda: sum(1 for s in channel.sent if s.kind == "reply") >= tasks,
            f"{tasks} replies",
            within_s=600,
        )
        rate = tasks / (time.perf_counter() - started)
        return rate, world.store.database.flushes / tasks
    finally:
        await world.close()


def _daemon_rss(root: Path, conversations: int) -> dict[str, Any]:
    api = FakeAnthropic()
    api.start()
    fake = FakeSlack()
    fake.start()
    fake.add_user(ALICE, "Alice")
    fake.add_channel(DM, im_with=ALICE)
    daemon: Daemon | None = None
    try:
        settings = {
            "bot_token": BOT_TOKEN, "app_token": APP_TOKEN, "team_ids": [TEAM],
            "allowed_users": [ALICE], "api_base_url": fake.base_url,
        }  # fmt: skip
        config = write_config(
            root, make_repo(root / "repo"), api, sandbox={"kind": "none"},
            channels={"console": None, "slack": settings}, agent=trivial_agent(),
            execution={"max_concurrent_tasks": 4},
        )  # fmt: skip
        daemon = Daemon(config, root / "daemon.log")
        fake.wait_connected(1)
        time.sleep(2)
        idle_rss = daemon.rss_mb()
        started = time.monotonic()
        roots = [fake.user_says(ALICE, DM, f"conversation {n}") for n in range(conversations)]
        fake.wait_until(
            lambda: len(answer_counts(fake)) >= len(roots),
            timeout=900, what="a reply in every thread",
        )  # fmt: skip
        answered_s = time.monotonic() - started
        time.sleep(2)
        return {
            "rss_mb_at_start": idle_rss,
            "rss_mb": daemon.rss_mb(),
            "conversations": conversations,
            "all_answered_s": answered_s,
        }
    finally:
        if daemon is not None:
            daemon.stop()
        fake.stop()
        api.stop()


def run(root: Path, *, conversations: int, tasks: int) -> Section:
    root.mkdir(parents=True, exist_ok=True)
    with _counting_commits() as commits:
        runs = {c: asyncio.run(_throughput(root / f"core-{c}", tasks, c)) for c in (1, 4, 16)}
    rates = {c: rate for c, (rate, _) in runs.items()}
    flushes = {c: per_task for c, (_, per_task) in runs.items()}
    per_task = {k: v / (3 * tasks) for k, v in commits.items()}
    fsync_ms = fsync_commit_ms(root)
    memory = _daemon_rss(root / "daemon", conversations)
    rows = [
        budget_row(f"core tasks/s, trivial agent, concurrency {c}", rate, "tasks/s", 200,
                   at_least=True)
        for c, rate in rates.items()
    ]  # fmt: skip
    rows.append(
        budget_row(f"daemon RSS, {conversations} conversations", memory["rss_mb"], "MB", 200)
    )
    rows.append(info_row("daemon RSS at start", memory["rss_mb_at_start"], "MB"))
    rows.append(
        info_row(
            "core: commits per task waiting for the disk", per_task["durable"], "",
            f"of {per_task['durable'] + per_task['relaxed']:.1f} (the rest ride on the next "
            f"flush); {fsync_ms:.1f} ms per fsynced commit on this disk",
        )
    )  # fmt: skip
    for c, count in flushes.items():
        rows.append(info_row(f"core: disk flushes per task, concurrency {c}", count, ""))
    details = {"tasks": tasks, "tasks_per_s": rates, "daemon": memory,
               "commits_per_task": per_task, "fsync_commit_ms": fsync_ms,
               "flushes_per_task": flushes}  # fmt: skip
    return Section("scale", rows, details)
