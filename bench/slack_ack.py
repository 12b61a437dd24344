"""Slack acknowledgement latency against tests/support/fake_slack.py, beside its floor, one run.

Two fakes of Slack (each its own thread, in this process): the real ``gateway-bot run``
(Socket Mode, trivial agent) connects to one, ``bench/minimal_slack_bot.py`` (a Socket Mode
client that acks and posts "Working on it…" at once) to the other. A person writes in a DM
thread; latency is the message's ``ts`` to the acknowledgement's ``ts``, both stamped by the
fake's clock as Slack stamps them: what the person sees. Rounds alternate between the two
and each waits for the bot's final reply (untimed), so nothing queues.

With ``baseline`` (``--baseline-checkout``: another checkout, e.g. main's beside a branch)
a third fake serves that checkout's daemon, in the same rounds: a before/after measured at
the same machine load, which on a shared machine two runs one after the other are not.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.conftest import make_repo, write_config
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import APP_TOKEN, BOT_TOKEN, BOT_USER, TEAM, FakeSlack

from bench import trace_report
from bench.daemon import Daemon, spawn_floor, trivial_agent
from bench.matrix_ack import percentile
from bench.report import Row, Section, ratio_row

ALICE, DM = "U0ALICE", "D0ALICE"
SETTLE_S = 0.1
"""With a baseline checkout: the pause before each bot's message (longer than the group
flush's ``RELAXED_FLUSH_S``)."""


def _fake() -> FakeSlack:
    fake = FakeSlack()
    fake.start()
    fake.add_user(ALICE, "Alice")
    fake.add_channel(DM, im_with=ALICE)
    return fake


def _ack_ms(fake: FakeSlack, root_ts: str, text: str) -> float:
    """Say ``text`` in the thread; milliseconds until the bot's acknowledgement of it."""
    ts = fake.user_says(ALICE, DM, text, thread_ts=root_ts)
    ack = fake.wait_until(
        lambda: next(
            (
                m
                for m in fake.bot_posts(DM, root_ts)
                if float(m["ts"]) > float(ts)
                and any(
                    word in (m.get("history") or [m])[0].get("text", "")
                    for word in ("Working on it", "Queued")
                )
            ),
            None,
        ),
        timeout=60,
        what=f"an acknowledgement of {text!r}",
    )
    return (float(ack["ts"]) - float(ts)) * 1000


class DurableCommit:
    """Half of the floor: one durable commit on the daemon's disk, made as the store makes
    one (a small SQLite WAL commit with ``synchronous=NORMAL``, then the WAL fsynced:
    ``state/sqlite_backend.py``), timed in the same rounds. A bot that promises a message is
    on disk before it acknowledges it cannot beat the minimal bot plus this."""

    def __init__(self, directory: Path) -> None:
        self._path = directory / "commit-floor.db"
        self._db = sqlite3.connect(self._path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, body TEXT)")
        self._wal = f"{self._path}-wal"

    def ms(self, body: str) -> float:
        started = time.perf_counter()
        self._db.execute("INSERT INTO messages (body) VALUES (?)", (body,))
        fd = os.open(self._wal, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return (time.perf_counter() - started) * 1000

    def close(self) -> None:
        self._db.close()


def _wait_done(fake: FakeSlack, root_ts: str, count: int) -> None:
    fake.wait_until(
        lambda: (
            sum("bench-done" in m.get("text", "") for m in fake.bot_posts(DM, root_ts)) >= count
        ),
        timeout=60,
        what=f"{count} replies",
    )


def _start_bot(
    root: Path, api: FakeAnthropic, fake: FakeSlack, trace: Path | None, checkout: Path | None
) -> Daemon:
    settings = {
        "bot_token": BOT_TOKEN, "app_token": APP_TOKEN, "team_ids": [TEAM],
        "allowed_users": [ALICE], "api_base_url": fake.base_url,
    }  # fmt: skip
    config = write_config(
        root, make_repo(root / "repo"), api, sandbox={"kind": "none"},
        channels={"console": None, "slack": settings}, agent=trivial_agent(),
    )  # fmt: skip
    return Daemon(config, root / "daemon.log", trace, checkout)


def _rows(
    name: str, bot: dict[str, Any], floor: dict[str, Any], commit: dict[str, Any]
) -> list[Row]:
    """p50 within the minimal bot's p50 plus one durable commit plus 1 ms; p99 within 1.5x of
    (the minimal bot's p99 plus one commit's p99): issue 33's targets."""
    p50_floor = floor["p50_ms"] + commit["p50_ms"]
    p99_floor = floor["p99_ms"] + commit["p99_ms"]
    return [
        Row(f"{name} p50", bot["p50_ms"], "ms", p50_floor,
            f"minimal Socket Mode bot {floor['p50_ms']:.1f} + commit {commit['p50_ms']:.1f}",
            "<= floor + 1 ms", bot["p50_ms"] <= p50_floor + 1.0),
        ratio_row(f"{name} p99", bot["p99_ms"], p99_floor,
                  f"minimal bot {floor['p99_ms']:.1f} + commit {commit['p99_ms']:.1f}", 1.5,
                  "ms"),
    ]  # fmt: skip


def run(rounds: int, root: Path, *, trace: bool = False, baseline: Path | None = None) -> Section:
    section = Section("slack acknowledgement")
    api = FakeAnthropic()
    api.start()
    bot_fake, floor_fake = _fake(), _fake()
    base_fake = _fake() if baseline else None
    daemons: list[Daemon] = []
    minimal: subprocess.Popen[str] | None = None
    try:
        trace_file = root / "trace.jsonl" if trace else None
        daemons.append(_start_bot(root, api, bot_fake, trace_file, None))
        bots = [(bot_fake, "bot")]
        if base_fake is not None:
            (root / "baseline").mkdir()
            daemons.append(_start_bot(root / "baseline", api, base_fake, None, baseline))
            bots.append((base_fake, "baseline bot"))
        minimal = spawn_floor(
            "bench.minimal_slack_bot", floor_fake.base_url, BOT_TOKEN, APP_TOKEN, BOT_USER
        )
        threads = {}
        for fake, name in bots:
            fake.wait_connected(1)
            threads[name] = fake.user_says(ALICE, DM, "bench: a thread of its own")
            _wait_done(fake, threads[name], 1)
        floor_root = floor_fake.user_says(ALICE, DM, "bench: a thread of its own")
        warmup = 3
        samples: dict[str, list[float]] = {
            "minimal bot": [], "durable commit": [], "bot": [], "baseline bot": []
        }  # fmt: skip
        commit = DurableCommit(root)
        for number in range(rounds + warmup):
            measured = {"minimal bot": _ack_ms(floor_fake, floor_root, f"bench {number}")}
            measured["durable commit"] = commit.ms(f"bench {number}")
            # Alternate which bot goes first, so neither always follows the floor; with two,
            # each starts after the other's trailing work (its relaxed commits' flush, up to
            # 50 ms after the reply) is done, or the second shares the disk with it.
            for fake, name in bots if number % 2 else bots[::-1]:
                if len(bots) > 1:
                    time.sleep(SETTLE_S)
                measured[name] = _ack_ms(fake, threads[name], f"bench {number}")
                _wait_done(fake, threads[name], number + 2)
            if number >= warmup:
                for name, value in measured.items():
                    samples[name].append(value)
            time.sleep(0.01)
        summary: dict[str, dict[str, Any]] = {
            name: {"p50_ms": percentile(values, 0.5), "p99_ms": percentile(values, 0.99),
                   "samples_ms": [round(v, 2) for v in values]}
            for name, values in samples.items() if values
        }  # fmt: skip
        section.details = {"rounds": rounds, "cases": summary}
        if baseline is not None:
            # Round by round (the same moment's load): this bot's time minus the baseline's.
            paired = [a - b for a, b in zip(samples["bot"], samples["baseline bot"], strict=True)]
            section.details["baseline_checkout"] = str(baseline)
            section.details["paired_difference_ms"] = {
                "p50": percentile(paired, 0.5),
                "rounds_faster": sum(d < 0 for d in paired),
                "rounds": len(paired),
            }
        if trace_file is not None:
            rows: list[dict[str, Any]] = trace_report.breakdown(
                trace_file, "SocketModeConnection._handle_one", edge="start"
            )
            section.details["trace"] = rows
            print(trace_report.render(rows))
        commit.close()
        floor_s, commit_s = summary["minimal bot"], summary["durable commit"]
        section.rows = _rows("slack ack", summary["bot"], floor_s, commit_s)
        if "baseline bot" in summary:
            section.rows += _rows(
                "slack ack, baseline checkout", summary["baseline bot"], floor_s, commit_s
            )
        return section
    finally:
        if minimal is not None:
            minimal.kill()
            minimal.wait(10)
        for daemon in daemons:
            daemon.stop()
        for fake in (bot_fake, floor_fake, base_fake):
            if fake is not None:
                fake.stop()
        api.stop()
