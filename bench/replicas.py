"""Replicas (decision 0093): tasks per second with one replica vs two, on SQLite and on
PostgreSQL, and failover time.

    uv run python -m bench.replicas [--runs 5] [--tasks 60]

Real ``gateway-bot run`` processes on one state database: the state directory's SQLite file
(WAL), or a PostgreSQL server the benchmark starts (tests/support/pg_fixtures.py's throw-away
cluster, a fresh schema per run; Debian's binaries, scripts/setup.d/55-postgresql.sh). Slack
through the fake (tests/support/fake_slack.py), an instant agent (a shell script speaking
Claude Code's
stream-json; warm sessions off everywhere, as ``ha`` turns them off), the host sandbox.
Throughput: ``--tasks`` messages over ``--tasks / 3``
conversations, sent at once; timed from the first message to the last reply, for a single
daemon without ``ha``, one replica, and two replicas, on each engine in the same run.
Failover (``ha.lease_seconds: 3``), ``--runs`` times on each engine: the replica holding the
Slack listener is killed (SIGKILL) and a message sent at once; timed from the kill to that
message's reply, which the other replica must take over to send.

Prints the numbers and medians. Not a test: they depend on the machine (and its load).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from tests.conftest import GatewayProcess, make_repo, write_config
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import APP_TOKEN, BOT_TOKEN, TEAM, FakeSlack
from tests.support.pg_fixtures import Databases, running_server

ALICE, DM = "U0ALICE", "D0ALICE"
LEASE_S = 3.0

INSTANT_AGENT = r"""#!/bin/sh
prompt=$(cat)
word=$(printf '%s\n' "$prompt" | grep -o 'job-[0-9]*' | tail -n 1)
echo '{"type":"system","subtype":"init","session_id":"bench-'$$'","model":"fake"}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"Done: '$word'",'\
'"session_id":"bench-'$$'","num_turns":1}'
"""


def _wait(check: Callable[[], Any], what: str, timeout: float = 300) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.02)
    raise TimeoutError(f"timed out waiting for {what}")


class Deployment:
    def __init__(
        self, root: Path, api: FakeAnthropic, fake: FakeSlack, ha: bool, state_url: str | None
    ) -> None:
        root.mkdir(parents=True)
        agent = root / "agent"
        agent.write_text(INSTANT_AGENT)
        agent.chmod(0o755)
        slack = {
            "bot_token": BOT_TOKEN,
            "app_token": APP_TOKEN,
            "team_ids": [TEAM],
            "allowed_users": [ALICE],
            "api_base_url": fake.base_url,
            "reconnect_max_delay_seconds": 1.0,
        }
        sections: dict[str, Any] = {
            "channels": {"console": None, "slack": slack},
            "agent": {"command": [str(agent)], "timeout_seconds": 60, "max_warm_sessions": 0},
            "logging": {"level": "INFO"},  # a replica says "joined" at INFO
        }
        if state_url is not None:
            sections["state"] = {"url": state_url}
        if ha:
            sections["ha"] = {"enabled": True, "lease_seconds": LEASE_S, "poll_seconds": 0.2}
        self.config = write_config(root, make_repo(root / "repo"), api, **sections)
        self.ha = ha
        self.processes: list[GatewayProcess] = []

    def start(self) -> GatewayProcess:
        process = GatewayProcess("run", "--config", str(self.config))
        self.processes.append(process)
        if self.ha:
            _wait(lambda: "joined (lease" in process.stderr, "a replica to join")
        return process

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()

    def logs(self) -> str:
        return "\n".join(f"--- {p.process.pid} ---\n{p.stderr[-4000:]}" for p in self.processes)


def _replied(fake: FakeSlack, root: str, word: str) -> bool:
    return any(f"Done: {word}" in m.get("text", "") for m in fake.bot_posts(DM, root))


def _throughput(
    root: Path,
    api: FakeAnthropic,
    fake: FakeSlack,
    replicas: int,
    tasks: int,
    state_url: str | None,
) -> float:
    fake.reset()
    fake.add_user(ALICE, "Alice")
    fake.add_channel(DM, im_with=ALICE)
    deployment = Deployment(root, api, fake, replicas > 0, state_url)
    try:
        deployment.start()
        fake.wait_connected(1, timeout=300)
        for _ in range(replicas - 1):
            deployment.start()
        conversations = max(1, tasks // 3)
        roots: list[str] = []
        sent: list[tuple[int, str]] = []
        started = time.perf_counter()
        for n in range(tasks):
            word = f"job-{n}"
            if n < conversations:
                roots.append(fake.user_says(ALICE, DM, f"do {word}"))
            else:
                fake.user_says(ALICE, DM, f"do {word}", thread_ts=roots[n % conversations])
            sent.append((n % conversations, word))
        for conversation, word in sent:
            _wait(partial(_replied, fake, roots[conversation], word), f"reply {word}")
        return tasks / (time.perf_counter() - started)
    except TimeoutError:
        print(deployment.logs())
        raise
    finally:
        deployment.stop()


def _failover(root: Path, api: FakeAnthropic, fake: FakeSlack, state_url: str | None) -> float:
    fake.reset()
    fake.add_user(ALICE, "Alice")
    fake.add_channel(DM, im_with=ALICE)
    deployment = Deployment(root, api, fake, True, state_url)
    try:
        holder = deployment.start()
        fake.wait_connected(1, timeout=300)
        deployment.start()
        warm = fake.user_says(ALICE, DM, "do job-0")
        _wait(lambda: _replied(fake, warm, "job-0"), "the first reply")
        killed = time.perf_counter()
        holder.kill()
        message = fake.user_says(ALICE, DM, "do job-1")
        _wait(lambda: _replied(fake, message, "job-1"), "the reply after the kill")
        return time.perf_counter() - killed
    finally:
        deployment.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="failovers to time")
    parser.add_argument("--tasks", type=int, default=60, help="messages per throughput run")
    args = parser.parse_args()
    api, fake = FakeAnthropic(), FakeSlack()
    api.start()
    fake.start()
    try:
        with (
            tempfile.TemporaryDirectory(prefix="gwb-bench-replicas-") as temp,
            running_server() as server,
        ):
            databases = Databases(server)
            base = Path(temp)
            engines: list[tuple[str, Callable[[], str | None]]] = [
                ("SQLite", lambda: None),
                ("PostgreSQL", databases.fresh),
            ]
            for engine, place in engines:
                for label, replicas in (("single daemon, no ha", 0), ("one replica", 1),
                                        ("two replicas", 2)):  # fmt: skip
                    rate = _throughput(
                        base / f"rate-{engine}-{replicas}", api, fake, replicas, args.tasks,
                        place(),
                    )  # fmt: skip
                    print(
                        f"{engine:>10} {label:>22}: {rate:6.1f} tasks/s ({args.tasks} tasks)",
                        flush=True,
                    )
            for engine, place in engines:
                times = []
                for run in range(args.runs):
                    elapsed = _failover(base / f"failover-{engine}-{run}", api, fake, place())
                    times.append(elapsed)
                    print(f"{engine} failover {run + 1}: {elapsed:.2f} s", flush=True)
                print(
                    f"{engine} failover (kill -9 of the listener's replica -> first reply from "
                    f"the other), lease {LEASE_S:.0f} s: median "
                    f"{statistics.median(times):.2f} s of {args.runs}",
                    flush=True,
                )
    finally:
        fake.stop()
        api.stop()


if __name__ == "__main__":
    main()
