"""Dashboard lists: the server time of the overview and the tasks and conversations lists
with 100,000 tasks in the store (issue 32: under 200 ms each).

A SQLite store (on this machine's disk, migrated by the real ``SqlStore``) is filled with
``tasks`` agent tasks over ``conversations`` conversations in three channels and the last
30 days, written as rows in bulk (the service would take an hour): 300 senders, mostly
succeeded, some failed, stopped and refused, a few running and waiting, messages of 8 to
60 words, a word that only three of them hold. The real dashboard app (``build_app`` over
the real ``Application``) serves it on a loopback port; a logged-in client asks each page
``rounds`` times, one request at a time, and the time from sending the request to having
read the whole body is the server time (the client is in the same process: its share is
small and counted against us). Each page: p50 and p95; the p95 must stay under 200 ms.
The machine's load average is printed with the rows: the machine is shared.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
import sqlite3
import statistics
import time
from pathlib import Path

from aiohttp import ClientSession, CookieJar
from aiohttp.test_utils import TestServer

from bench.report import Section, budget_row, info_row
from gateway_bot.config.dashboard import DashboardSettings
from gateway_bot.core.application import Application
from gateway_bot.core.feed import ChangeFeed
from gateway_bot.core.live_state import DaemonLiveState
from gateway_bot.dashboard.server import build_app
from gateway_bot.dashboard.sessions import load_or_make_key
from gateway_bot.domain.messages import InboundMessage, RawMessage, Reply, Usage
from gateway_bot.sandbox.base import SandboxContainer
from gateway_bot.state.sql_store import SqlStore

TOKEN = "bench-dashboard-lists-token-Vq8"
BUDGET_MS = 200.0
DAY = 86400
CHANNELS = ("slack", "matrix", "email")
RARE = "zanzibar"
PHRASE = (
    "fix the flaky test build fails on arm64 add pagination to invoices summarise incidents "
    "bump aiohttp write a migration index review the risky parts release notes refactor the "
    "exporter stream containers translate onboarding retry policy profile search endpoint "
    "slow after deploy please and then open a pull request with tests"
)
WORDS = tuple(PHRASE.split(" "))
ENDINGS = (
    ("success", 0.86), ("execution_failed", 0.05), ("timeout", 0.01),
    ("internal_error", 0.01), ("cancelled", 0.04), ("rejected", 0.03),
)  # fmt: skip


class Containers:
    async def list_containers(self) -> list[SandboxContainer]:
        return []


def fill(path: Path, tasks: int, conversations: int, now: float, seed: int = 32) -> dict[str, str]:
    """Write the rows straight into the migrated file; returns the pages' query values."""
    rng = random.Random(seed)
    db = sqlite3.connect(path)
    made = []
    for n in range(conversations):
        channel = CHANNELS[n % len(CHANNELS)]
        made.append((secrets.token_hex(4), channel, f"{channel}-room-{n}", f"Room {n}"))
    db.executemany(
        "INSERT INTO conversations (id, channel, channel_key, active, created_at, updated_at)"
        " VALUES (?, ?, ?, 1, ?, ?)",
        [(c, ch, key, now - 30 * DAY, now - rng.uniform(0, 30 * DAY)) for c, ch, key, _ in made],
    )
    reasons, weights = zip(*ENDINGS, strict=True)
    rows = []
    for n in range(tasks):
        conversation_id, channel, key, title = rng.choice(made)
        sender_id = f"user{rng.randrange(300)}"
        created = now - rng.uniform(60, 30 * DAY)
        body = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 60)))
        if n % (tasks // 3) == 7:
            body += f" {RARE}"
        state, reason = "completed", rng.choices(reasons, weights)[0]
        started: float | None = created + rng.uniform(0.3, 30)
        run = rng.lognormvariate(4.2, 0.8)
        completed: float | None = started + run if started is not None else None
        if n >= tasks - 6:  # the newest few still run or wait
            state, reason = ("executing", None) if n % 2 else ("queued", None)
            created, completed = now - rng.uniform(1, 600), None
            started = created + 1 if state == "executing" else None
        elif reason == "rejected":
            started, completed = None, created + 1
        raw = RawMessage(channel, f"m{n}", sender_id, {"text": body}, created)
        parsed = InboundMessage(
            channel, f"m{n}", sender_id, sender_id.title(), body, key, created,
            channel_context={"room": key, "event": secrets.token_hex(16)},
            room=key, room_title=title,
        )  # fmt: skip
        cost = round(run * 0.002, 4) if started is not None and completed is not None else 0.0
        reply = Reply(f"Done: {body[:200]}", usage=Usage(cost, 3, run)) if completed else None
        rows.append(
            (
                secrets.token_hex(6), channel, f"m{n}", conversation_id, state, reason,
                json.dumps(raw.to_json()), json.dumps(parsed.to_json()),
                json.dumps(reply.to_json()) if reply else None, 1 if reply else 0,
                created, started, completed, cost, 3, None, 1,
            )
        )  # fmt: skip
    db.executemany(
        "INSERT INTO tasks (id, channel, message_id, conversation_id, state, completion_reason,"
        " raw_json, parsed_json, reply_json, reply_delivered, created_at, started_at,"
        " completed_at, cost_usd, num_turns, error, attempts, kind)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'agent')",
        rows,
    )
    db.commit()
    deep = db.execute(
        "SELECT created_at, rowid FROM tasks WHERE kind = 'agent'"
        " ORDER BY created_at DESC, rowid DESC LIMIT 1 OFFSET ?",
        (49 * 50 - 1,),
    ).fetchone()
    db.close()
    return {"after": f"{deep[0]!r}_{deep[1]}", "sender": "user7"}


async def _measure(root: Path, tasks: int, conversations: int, rounds: int) -> Section:
    path = root / "state.db"
    store = SqlStore(path)
    await store.open()  # the schema, migrations included
    await store.close()
    now = time.time()
    started = time.monotonic()
    values = await asyncio.to_thread(fill, path, tasks, conversations, now)
    fill_s = time.monotonic() - started
    store = SqlStore(path)
    await store.open()
    feed = ChangeFeed()
    application = Application(store, DaemonLiveState({}, Containers()))  # type: ignore[arg-type]
    key = load_or_make_key(root / "dashboard")
    app = build_app(application, feed, DashboardSettings(token=TOKEN), key, database=store.database)
    server = TestServer(app)
    await server.start_server()
    pages = {
        "overview /": "/",
        "/tasks": "/tasks",
        "/tasks page 50": f"/tasks?after={values['after']}",
        "/tasks?state=failed&channel=email": "/tasks?state=failed&channel=email",
        f"/tasks?q={RARE} (3 match)": f"/tasks?q={RARE}",
        "/tasks?q=arm64 (many match)": "/tasks?q=arm64",
        "/tasks?sender=user7": f"/tasks?sender={values['sender']}",
        "/conversations": "/conversations",
        f"/conversations?q={RARE}": f"/conversations?q={RARE}",
    }
    timings: dict[str, list[float]] = {}
    try:
        async with ClientSession(
            cookie_jar=CookieJar(unsafe=True), headers={"Sec-Fetch-Site": "same-origin"}
        ) as client:
            login = await client.post(
                server.make_url("/login"), data={"token": TOKEN}, allow_redirects=False
            )
            assert login.status == 303, await login.text()
            for label, url in pages.items():
                samples = []
                for _ in range(rounds + 1):  # the first warms the caches, and is not kept
                    begun = time.perf_counter()
                    async with client.get(server.make_url(url), allow_redirects=False) as got:
                        body = await got.read()
                    samples.append((time.perf_counter() - begun) * 1000)
                    assert got.status == 200, (url, got.status, body[:300])
                timings[label] = samples[1:]
    finally:
        await server.close()
        feed.close()
        await store.close()
    load = os.getloadavg()
    rows = []
    for label, samples in timings.items():
        ordered = sorted(samples)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        rows.append(budget_row(f"dashboard {label}: p95", p95, "ms", BUDGET_MS))
        rows.append(info_row(f"dashboard {label}: p50", statistics.median(samples), "ms"))
    rows[0].note = (
        f"{tasks} tasks, {conversations} conversations, {rounds} requests a page; "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores, shared)"
    )
    return Section(
        "dashboard-lists",
        rows,
        details={
            "tasks": tasks,
            "conversations": conversations,
            "fill_s": round(fill_s, 1),
            "database_mb": round(path.stat().st_size / 1e6, 1),
            "load_average": load,
            "samples_ms": timings,
        },
    )


def run(root: Path, tasks: int = 100_000, conversations: int = 2_000, rounds: int = 20) -> Section:
    return asyncio.run(_measure(root, tasks, conversations, rounds))


if __name__ == "__main__":
    import sys
    import tempfile

    from bench.report import table

    with tempfile.TemporaryDirectory(prefix="gwb-bench-lists-") as tmp:
        quick = "--quick" in sys.argv
        section = run(Path(tmp), 5_000 if quick else 100_000, 100 if quick else 2_000)
    print(table([section]))
