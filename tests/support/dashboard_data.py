"""A week of a team's work in a real store, for looking at the dashboard as an operator
does (``tests/browser/test_dashboard_look.py``, the screenshots in docs/): a few hundred
agent tasks over the last seven days across three channels, several conversations and
senders, succeeded, failed, stopped and refused, with costs and waits; plus schedules.

The finished tasks are written as rows of the store's own tables (a finished task is one
row; going through the service would take minutes and could not date them last Tuesday),
conversations through the store's API. Live things (a held message, an agent's question,
a command waiting for approval) are made by the caller through the running core, as a
person would, so what waits is really waiting.

Seeded: the same week every run.
"""

from __future__ import annotations

import json
import math
import random
import secrets
import time
from dataclasses import dataclass

from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from gateway_bot.domain.messages import InboundMessage, RawMessage, Reply, Usage
from gateway_bot.state.schedules_store import SqlSchedules
from gateway_bot.state.sql_store import SqlStore

DAY = 86400
CONVERSATIONS = (
    ("slack", "C024BE91L:backend", "#backend", ("Alice Martin", "Bob Okafor", "Chen Wei")),
    ("slack", "C024BE92M:frontend", "#frontend", ("Dana Ruiz", "Alice Martin")),
    ("slack", "D0431KQ:alice", "Alice Martin (DM)", ("Alice Martin",)),
    ("matrix", "!ops:example.org", "Ops", ("Erik Lund", "Bob Okafor")),
    ("matrix", "!lab:example.org", "ML lab", ("Fatima Zahra", "Chen Wei")),
    ("email", "<release-2.4@example.org>", "Release 2.4 notes", ("Grace Hopper",)),
    ("email", "<invoice-bug@example.org>", "Invoice rounding bug", ("Dana Ruiz", "Grace Hopper")),
)
ASKS = (
    "Fix the flaky test in tests/test_orders.py and open a PR",
    "Why does the nightly build fail on arm64? Look at the last CI log",
    "Add pagination to GET /api/invoices (cursor based) with tests",
    "Summarise yesterday's incidents from the ops channel",
    "Bump aiohttp to the latest patch release and run the suite",
    "Write a migration that adds an index on orders(customer_id, created_at)",
    "Review PR #412 and list anything risky",
    "Draft release notes for 2.4 from the merged PRs",
    "The invoice total is off by one cent for 3-item carts: find out why",
    "Refactor the CSV exporter to stream instead of loading everything",
    "Check which containers use more than 1 GiB and why",
    "Translate the onboarding email to German",
    "Explain what the retry policy in worker.py does",
    "Profile the search endpoint; it got slow after Tuesday's deploy",
)
ENDINGS = (
    (CompletionReason.SUCCESS, 0.80),
    (CompletionReason.EXECUTION_FAILED, 0.07),
    (CompletionReason.TIMEOUT, 0.02),
    (CompletionReason.INTERNAL_ERROR, 0.02),
    (CompletionReason.CANCELLED, 0.05),
    (CompletionReason.REJECTED, 0.04),
)


@dataclass(frozen=True)
class Week:
    tasks: int
    conversations: dict[str, str]
    """channel key -> conversation id."""


def _when(rng: random.Random, now: float) -> float:
    """A moment of the last seven days, mostly in working hours."""
    while True:
        at = now - rng.uniform(0, 7 * DAY)
        hour = time.localtime(at).tm_hour
        if 8 <= hour < 19 or rng.random() < 0.15:
            return at


async def fill_week(store: SqlStore, now: float, *, count: int = 320, seed: int = 32) -> Week:
    """``count`` finished agent tasks over the seven days before ``now``, into ``store``
    (open). Returns what the caller may want to link to."""
    rng = random.Random(seed)
    conversations: dict[str, str] = {}
    for channel, key, _title, _people in CONVERSATIONS:
        record = await store.create_conversation(channel, key, rng.choice((None, "sonnet")))
        conversations[key] = record.id
    reasons = [reason for reason, _ in ENDINGS]
    weights = [weight for _, weight in ENDINGS]
    rows = []
    for n in range(count):
        channel, key, title, people = rng.choice(CONVERSATIONS)
        sender = rng.choice(people)
        sender_id = sender.split()[0].lower()
        # the last day gets a burst of waits, so the queue chart has something to show
        created = now - rng.uniform(600, DAY) if n % 8 == 0 else _when(rng, now)
        burst = n % 8 == 0 and rng.random() < 0.6
        reason = rng.choices(reasons, weights)[0]
        wait = rng.uniform(60, 1500) if burst else rng.uniform(0.3, 6)
        run = min(1800.0, rng.lognormvariate(math.log(70), 0.8))
        started: float | None = created + wait
        if reason is CompletionReason.REJECTED:
            started, run = None, 0.0
        elif reason is CompletionReason.TIMEOUT:
            run = 1800.0
        elif reason is CompletionReason.CANCELLED:
            run *= 0.4
        completed = (started if started is not None else created + wait) + run
        if completed > now - 5:
            continue
        cost = round(run * rng.uniform(0.0008, 0.004), 4) if started is not None else 0.0
        message_id = f"{channel}-{n}"
        body = rng.choice(ASKS)
        raw = RawMessage(channel, message_id, sender_id, {"text": body}, created)
        parsed = InboundMessage(
            channel, message_id, sender_id, sender, body, key, created, room=key, room_title=title
        )
        if reason is CompletionReason.SUCCESS:
            reply = Reply(f"Done: {body.lower()}.", usage=Usage(cost, rng.randint(2, 30), run))
        elif reason is CompletionReason.CANCELLED:
            reply = Reply("Stopped.", stopped=True)
        elif reason is CompletionReason.REJECTED:
            reply = Reply("Not allowed here.", is_error=True)
        else:
            reply = Reply("The agent failed: exit status 1.", is_error=True)
        rows.append(
            (
                secrets.token_hex(6), channel, message_id, conversations[key],
                TaskState.COMPLETED.value, reason.value, json.dumps(raw.to_json()),
                json.dumps(parsed.to_json()), json.dumps(reply.to_json()), 1, created, started,
                completed, cost, rng.randint(1, 30) if started else 0,
                None if reason is CompletionReason.SUCCESS else reply.text, 1,
            )
        )  # fmt: skip
    async with store.database.transaction() as db:
        for row in rows:
            await db.execute(
                "INSERT INTO tasks (id, channel, message_id, conversation_id, state,"
                " completion_reason, raw_json, parsed_json, reply_json, reply_delivered,"
                " created_at, started_at, completed_at, cost_usd, num_turns, error, attempts,"
                " kind) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'agent')",
                row,
            )
            await db.execute(
                "INSERT INTO inbound_messages (channel, message_id, task_id, received_at)"
                " VALUES (?, ?, ?, ?)",
                (row[1], row[2], row[0], row[10]),
            )
        for conversation_id in conversations.values():
            await db.execute(
                "UPDATE conversations SET created_at = ?, updated_at = ? WHERE id = ?",
                (now - 7 * DAY, now - rng.uniform(60, DAY), conversation_id),
            )
    return Week(len(rows), conversations)


async def add_schedules(schedules: SqlSchedules, now: float) -> None:
    """A daily report, a weekly dependency check, and a paused one."""
    for channel, key, sender, expression, prompt in (
        ("slack", "C024BE91L:backend", "bob", "0 9 * * 1-5", "Summarise PRs open for 3 days"),
        ("matrix", "!ops:example.org", "erik", "30 6 * * 1", "Check for outdated dependencies"),
        ("email", "<release-2.4@example.org>", "grace", "0 17 * * 5", "Draft the week's changelog"),
    ):  # fmt: skip
        origin = InboundMessage(channel, f"s-{key}", sender, sender.title(), prompt, key, now)
        made = await schedules.create(origin, "cron", expression, "UTC", prompt, now + 3600, 10)
        assert made is not None
    paused = await schedules.listed()
    await schedules.set_state(paused[-1].id, "paused", None)
