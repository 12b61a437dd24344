"""Restart recovery: N conversations with live containers and N queued messages; SIGKILL;
restart; time until every message is answered; containers recreated; messages lost or doubled.
Also the memory of an idle conversation (its container plus its share of the proxy).

The real ``gateway-bot run`` with the Podman sandbox (its own deployment, egress network and
podman service socket, all removed afterwards) and Slack Socket Mode on tests/support/fake_slack.py:
each top-level DM message roots a thread, a conversation with a container of its own. The
agent is a trivial script in the target repo (``/workspace/trivial-agent.sh``): it answers at
once, except that the first daemon's config passes it ``hold`` and the queued messages say
``HOLD``, so they stay queued (or running) until the SIGKILL. The second daemon's config is
the same without ``hold``. Fake Slack has every envelope acked before the kill: all N
messages were accepted. Lost = a thread without its second answer; doubled = more than two.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.conftest import make_repo, write_config
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import APP_TOKEN, BOT_TOKEN, BOT_USER, TEAM, FakeSlack

from bench import trace_report
from bench.daemon import TRIVIAL_AGENT, Daemon
from bench.report import LoadSampler, Row, Section, budget_row, info_row

ALICE, DM = "U0ALICE", "D0ALICE"
HOLDING_AGENT = """#!/bin/sh
# bench/restart_recovery.py: answers at once, but holds a HOLD message when run with "hold".
prompt=$(cat)
if [ "$1" = hold ]; then
  case "$prompt" in *HOLD*) sleep 600 ;; esac
fi
"""


def _podman(*args: str, check: bool = False) -> str:
    done = subprocess.run(["podman", *args], capture_output=True, text=True, check=check)
    return done.stdout


def _agent_containers(deployment: str) -> dict[str, str]:
    """Context id -> container id of the deployment's agent containers."""
    listed = json.loads(
        _podman("ps", "-a", "--format", "json",
                "--filter", f"label=gateway-bot.deployment={deployment}",
                "--filter", "label=gateway-bot.role=agent") or "[]"
    )  # fmt: skip
    return {e["Labels"]["gateway-bot.context"]: e["Id"] for e in listed}


def _memory_mb(deployment: str) -> dict[str, Any]:
    """Memory in use by the deployment's containers (podman stats, one sample)."""
    listed = json.loads(
        _podman("ps", "--format", "json", "--filter", f"label=gateway-bot.deployment={deployment}")
        or "[]"
    )
    roles = {e["Id"]: e["Labels"].get("gateway-bot.role", "") for e in listed}
    stats = json.loads(_podman("stats", "--no-stream", "--no-reset", "--format", "json",
                               *roles) or "[]")  # fmt: skip
    found: dict[str, list[float]] = {"agent": [], "proxy": []}
    for entry in stats:
        role = next((r for i, r in roles.items() if i.startswith(entry["id"])), "")
        usage = entry.get("mem_usage", "0B / 0B").split("/")[0].strip()
        found.setdefault(role, []).append(_to_mb(usage))
    return found


def _to_mb(text: str) -> float:
    units = {"B": 1e-6, "kB": 1e-3, "KB": 1e-3, "KiB": 1 / 1024, "MB": 1.0, "MiB": 1.048576,
             "GB": 1e3, "GiB": 1073.741824}  # fmt: skip
    for unit in sorted(units, key=len, reverse=True):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * units[unit]
    return float(text)


def answer_counts(fake: FakeSlack) -> Counter[str]:
    """Answers (the trivial agent's text) per thread, in one pass over the DM."""
    return Counter(
        m.get("thread_ts", "")
        for m in fake.messages.get(DM, [])
        if m.get("user") == BOT_USER and "bench-done" in m.get("text", "")
    )


def _config(root: Path, repo: Path, api: FakeAnthropic, fake: FakeSlack, sandbox: dict[str, Any],
            *, hold: bool, concurrency: int) -> Path:  # fmt: skip
    command = ["sh", "/workspace/trivial-agent.sh", *(["hold"] if hold else [])]
    slack = {"bot_token": BOT_TOKEN, "app_token": APP_TOKEN, "team_ids": [TEAM],
             "allowed_users": [ALICE], "api_base_url": fake.base_url}  # fmt: skip
    return write_config(
        root, repo, api, sandbox=sandbox, channels={"console": None, "slack": slack},
        agent={"command": command, "max_warm_sessions": 0, "timeout_seconds": 900},
        execution={"max_concurrent_tasks": concurrency, "max_pending_per_conversation": 3},
    )  # fmt: skip


def _startup_log(log: Path, started_at: float) -> dict[str, Any]:
    """From the restarted daemon's log: the time from the process's start to its first line
    (Python's imports, the config, the store: before any podman work), how long reattaching
    took, the first line to the last task done, and the stray sweeps
    (``ended N stray process(es)``: N = 100 means the sweep ran its 100 rounds, every round
    killing a process started again, as a container's init once did: since 2026-11-26 init
    is gateway-bot's init, ``containers.INIT_COMMAND``, which starts none)."""
    stamp = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
    times: list[tuple[float, str]] = []
    for line in log.read_text(errors="replace").splitlines():
        if found := stamp.match(line):
            moment = datetime.strptime(found[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            times.append((moment, line))
    if not times:
        return {}
    reattached = [t for t, line in times if "reattached to running container" in line]
    sweeps = [int(m[1]) for _, line in times if (m := re.search(r"ended (\d+) stray", line))]
    connected = next((t for t, line in times if "channel connected" in line), None)
    done = [t for t, line in times if "done: success" in line]
    return {
        "start_to_first_log_s": times[0][0] - started_at,
        "first_log_to_last_task_done_s": (done[-1] - times[0][0]) if done else None,
        "first_log_to_last_reattach_s": (reattached[-1] - times[0][0]) if reattached else None,
        "first_log_to_channel_connected_s": (connected - times[0][0]) if connected else None,
        "reattached": len(reattached),
        "stray_sweeps": len(sweeps),
        "stray_sweeps_at_100_rounds": sum(1 for n in sweeps if n >= 100),
    }


def _cleanup(deployment: str, egress: str, socket: Path) -> None:
    label = f"label=gateway-bot.deployment={deployment}"
    if ids := _podman("ps", "-aq", "--filter", label).split():
        _podman("rm", "-f", "-t", "0", *ids)
    if networks := _podman("network", "ls", "-q", "--filter", label).split():
        _podman("network", "rm", "-f", *networks)
    _podman("network", "rm", "-f", egress)
    service = f"unix://{socket}"
    for entry in Path("/proc").iterdir():  # the podman service the daemon started for us
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if service in argv and "system service" in argv:
            os.kill(int(entry.name), signal.SIGTERM)


def run(root: Path, conversations: int, *, trace: bool = False, concurrency: int = 8) -> Section:
    """``trace``: the restarted daemon runs traced (bench/traced_daemon.py, slower) and the
    section gets each traced call's count, median and summed time (``trace_report.totals``).
    ``concurrency``: the daemons' ``max_concurrent_tasks`` (is 8 at a time the limit?)."""
    deployment = f"bench-restart-{secrets.token_hex(3)}"
    egress = f"gwb-bench-egress-{secrets.token_hex(3)}"
    socket = root / "podman.sock"
    _podman("network", "create", "--disable-dns", egress, check=True)
    sandbox = {"kind": "podman", "deployment": deployment, "egress_network": egress,
               "podman": {"socket": str(socket)},
               "max_live_containers": conversations + 8}  # fmt: skip
    api = FakeAnthropic()
    api.start()
    fake = FakeSlack()
    fake.start()
    fake.add_user(ALICE, "Alice")
    fake.add_channel(DM, im_with=ALICE)
    repo = make_repo(
        root / "repo",
        {"trivial-agent.sh": HOLDING_AGENT + TRIVIAL_AGENT.read_text().split("\n", 1)[1]},
    )
    first: Daemon | None = None
    second: Daemon | None = None
    try:
        config = _config(root, repo, api, fake, sandbox, hold=True, concurrency=concurrency)
        first = Daemon(config, root / "daemon-1.log")
        fake.wait_connected(1, timeout=300)
        started = time.monotonic()
        roots = [fake.user_says(ALICE, DM, f"conversation {n}") for n in range(conversations)]
        fake.wait_until(lambda: len(answer_counts(fake)) >= conversations, timeout=1800,
                        what="every conversation's first answer")  # fmt: skip
        setup_s = time.monotonic() - started
        before = _agent_containers(deployment)
        for ts in roots:
            fake.user_says(ALICE, DM, f"HOLD queued in {ts}", thread_ts=ts)
        fake.wait_until(lambda: not fake.pending, timeout=300, what="every envelope acked")
        answered_before_kill = sum(n >= 2 for n in answer_counts(fake).values())
        first.kill()
        hellos = fake.hellos
        config = _config(root, repo, api, fake, sandbox, hold=False, concurrency=concurrency)
        restart, restart_wall = time.monotonic(), time.time()
        trace_file = root / "trace.jsonl" if trace else None
        with LoadSampler(every_s=0.25) as load:  # the restart's own load, not the set-up's
            second = Daemon(config, root / "daemon-2.log", trace_file)
            fake.wait_until(lambda: fake.hellos > hellos, timeout=300, what="the reconnect")
            connected_s = time.monotonic() - restart
            fake.wait_until(
                lambda: sum(n >= 2 for n in answer_counts(fake).values()) >= len(roots),
                timeout=900, what="every queued message answered",
            )  # fmt: skip
            recovered_s = time.monotonic() - restart
        time.sleep(3)  # a doubled answer would come now
        counted = answer_counts(fake)
        counts = [counted[ts] for ts in roots]
        after = _agent_containers(deployment)
        recreated = sum(1 for c, i in before.items() if after.get(c) != i)
        memory = _memory_mb(deployment)
        agents = memory.get("agent") or [0.0]
        proxy = sum(memory.get("proxy") or [0.0])
        per_idle = sum(agents) / len(agents) + proxy / max(1, len(agents))
        rows: list[Row] = [
            budget_row(f"restart: all {conversations} queued answered after start", recovered_s,
                       "s", 5.0),
            budget_row("restart: containers recreated", recreated, "", 0),
            budget_row("restart: messages lost", sum(c < 2 for c in counts), "", 0),
            budget_row("restart: messages answered twice", sum(c > 2 for c in counts), "", 0),
            budget_row(f"idle conversation memory ({len(agents)} live)", sum(agents) / len(agents),
                       "MB", 5.0),
            info_row("idle conversation + its proxy share", per_idle, "MB",
                     f"proxy {proxy:.0f} MB shared by {len(agents)}"),
        ]  # fmt: skip
        details = {
            "conversations": conversations, "max_concurrent_tasks": concurrency,
            "first_answers_s": setup_s, "answered_before_kill": answered_before_kill,
            "reconnected_s": connected_s, "all_answered_s": recovered_s,
            "answers_per_thread": counts, "containers_before": len(before),
            "containers_after": len(after), "memory_mb": memory,
            "restart_log": _startup_log(root / "daemon-2.log", restart_wall),
            "agent_own_time": "trivial agent: answers at once (its exec is counted as ours)",
        }  # fmt: skip
        if trace_file is not None:
            traced = trace_report.totals(trace_file)
            details["trace"] = traced
            print(trace_report.render_totals(traced[:40]))
        for row in rows[:4]:
            row.load = load.range
        details["restart_load_average_1m"] = {"range": load.range, "mean": load.mean}
        return Section("restart recovery", rows, details)
    finally:
        for daemon in (first, second):
            if daemon is not None:
                daemon.kill()
        fake.stop()
        api.stop()
        _cleanup(deployment, egress, socket)
