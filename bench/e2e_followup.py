"""End to end against running the agent by hand: a person's turn in the console channel
(the line typed to the final reply printed) and in a Matrix room on a real Synapse (sent to
the reply seen by their client), beside the same prompt run by hand.

The real ``gateway-bot chat`` (console channel, SQLite store, the configured sandbox: Podman
by default, its own deployment, egress network and service socket, removed afterwards) runs
the real Claude Code CLI against tests/support/fake_anthropic.py, with warm sessions as
shipped. Each round starts a new conversation (``/new``), times its first turn (workspace,
container, cold agent) and then a follow-up in it (the warm session). The baseline is the
same two prompts run by hand on the host with the same environment: ``claude -p PROMPT``
in a fresh clone of the repository, then ``claude -p PROMPT --resume <session>``; rounds
alternate the two, so both see the same load.

Targets (issue 33): the follow-up at most 0.3x the hand-run ``--resume``, the first turn at
most 1.5x the hand-run ``claude -p``. The breakdown of each turn comes from the task's own
timestamps and the CLI's ``result`` (console; Matrix's differs by the homeserver's hops):
to the store (the console's read and the message's
commit), to its run (routing, the queue, the acknowledgement), the agent's own time (the
CLI's ``duration_ms``), and the rest of the run (workspace, container, the runner's trips,
the reply's commit and its print).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sqlite3
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from tests.conftest import GatewayProcess, make_repo, write_config
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.synapse_fixtures import Event, Human, SynapseServer, matrix_config, membership

from bench.daemon import Daemon
from bench.report import Row, Section, info_row, ratio_row
from gateway_bot.agents.claude.runner import QUIET_ENV

AGENT_ENV = {"ANTHROPIC_API_KEY": "bench-key", "CLAUDE_CODE_MAX_RETRIES": "0"}


def _hand_env(api: FakeAnthropic, config_dir: Path) -> dict[str, str]:
    """What the daemon gives the agent (its quiet variables, the model API), on the host."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE"))}
    return {**env, **QUIET_ENV, **AGENT_ENV, "ANTHROPIC_BASE_URL": api.base_url,
            "CLAUDE_CONFIG_DIR": str(config_dir)}  # fmt: skip


def _by_hand(api: FakeAnthropic, repo: Path, root: Path, number: int) -> dict[str, float]:
    """``claude -p`` then ``claude -p --resume`` in a fresh clone: seconds each."""
    work = root / f"hand-{number}"
    subprocess.run(["git", "clone", "-q", str(repo), str(work / "repo")], check=True)
    env = _hand_env(api, work / "claude")
    times: dict[str, float] = {}
    session: list[str] = []
    for turn, prompt in (("first", f"hand first {number}"), ("follow-up", f"hand follow {number}")):
        argv = ["claude", "-p", prompt, "--output-format", "json"]
        if session:
            argv += ["--resume", session[0]]
        started = time.perf_counter()
        done = subprocess.run(argv, cwd=work / "repo", env=env, capture_output=True, text=True,
                              timeout=120, check=True)  # fmt: skip
        times[turn] = time.perf_counter() - started
        result = json.loads(done.stdout)
        assert not result.get("is_error"), done.stdout
        session = [str(result["session_id"])]
    return times


def _podman(*args: str) -> str:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=False).stdout


def _sandbox(kind: str, root: Path) -> tuple[dict[str, Any], list[str]]:
    """The config's sandbox section, and the deployment's names to remove afterwards."""
    if kind == "none":
        return {"kind": "none"}, []
    deployment = f"bench-e2e-{secrets.token_hex(3)}"
    egress = f"gwb-bench-e2e-{secrets.token_hex(3)}"
    _podman("network", "create", "--disable-dns", egress)
    section = {"kind": "podman", "deployment": deployment, "egress_network": egress,
               "podman": {"socket": str(root / "podman.sock")}}  # fmt: skip
    return section, [deployment, egress, str(root / "podman.sock")]


def _remove(names: list[str]) -> None:
    if not names:
        return
    from bench.restart_recovery import _cleanup

    deployment, egress, socket = names
    _cleanup(deployment, egress, Path(socket))


def _agent_durations(state: Path) -> dict[str, float]:
    """The CLI's own ``duration_ms`` per prompt, from the agents' event logs."""
    found: dict[str, float] = {}
    for log in state.rglob("*.jsonl"):
        try:
            lines = log.read_text(errors="replace").splitlines()
        except OSError:
            continue
        prompt = ""
        for line in lines:
            if '"duration_ms"' not in line and "bench-e2e" not in line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            text = json.dumps(event)
            if "bench-e2e" in text and event.get("type") != "result":
                start = text.index("bench-e2e")
                prompt = text[start : start + 40].split("\\")[0].split('"')[0]
            if event.get("type") == "result" and prompt and "duration_ms" in event:
                found[prompt] = float(event["duration_ms"]) / 1000
    return found


def _tasks(state: Path) -> dict[str, dict[str, float]]:
    """Each prompt's task timestamps (accepted, started, completed) from the store."""
    db = sqlite3.connect(f"file:{state / 'state.db'}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT raw_json, created_at, started_at, completed_at FROM tasks")
        found = {}
        for raw_json, created, started, completed in rows:
            text = str(json.loads(raw_json).get("payload", {}).get("text", ""))
            if text.startswith("bench-e2e"):
                found[text] = {"created": created, "started": started or 0.0,
                               "completed": completed or 0.0}  # fmt: skip
        return found
    finally:
        db.close()


def _turn(chat: GatewayProcess, prompt: str) -> dict[str, float]:
    sent = time.time()
    started = time.perf_counter()
    chat.send(prompt)
    chat.expect(rf"^agent> Echo: {prompt}$", timeout=180)
    return {"s": time.perf_counter() - started, "sent": sent, "seen": time.time()}


def _echo_of(bot: str, prompt: str) -> Callable[[Event], bool]:
    """The bot's final reply to ``prompt`` (a message of its own or an edit carrying it)."""
    wanted = f"Echo: {prompt}"
    return lambda e: e.get("sender") == bot and wanted in json.dumps(e.get("content", {}))


async def _matrix_turns(
    root: Path, api: FakeAnthropic, repo: Path, sandbox_section: dict[str, Any], rounds: int
) -> dict[str, list[dict[str, float]]]:
    """The same turns in a Matrix room on a real Synapse: sent -> the reply seen by the
    person's client (syncing as Element does)."""
    server = SynapseServer(root / "synapse")
    await asyncio.to_thread(server.start)
    daemon: Daemon | None = None
    people: list[Human] = []
    try:
        alice = Human(server, await server.register("alice"), root / "alice")
        people.append(alice)
        await alice.sync(0)
        bot = await server.register("bot")
        room = await alice.create_room([bot.user_id], name="e2e")
        config = matrix_config(root / "matrix", repo, api, server, bot, [alice.user_id])
        settings = yaml.safe_load(config.read_text())
        settings["sandbox"] = sandbox_section
        settings["agent"] = {**settings["agent"], **_agent_section(api)}
        config.write_text(yaml.safe_dump(settings))
        daemon = Daemon(config, root / "matrix-daemon.log")
        await alice.wait_for(room, membership(bot.user_id, "join"), within=300)
        turns: dict[str, list[dict[str, float]]] = {"first": [], "follow-up": []}

        async def turn(prompt: str) -> dict[str, float]:
            sent, started = time.time(), time.perf_counter()
            await alice.say(room, prompt)
            await alice.wait_for(room, _echo_of(bot.user_id, prompt), within=120)
            return {"s": time.perf_counter() - started, "sent": sent, "seen": time.time()}

        await turn("bench-e2e matrix warm-up")
        for number in range(rounds):
            await alice.say(room, "/new")
            await alice.wait_for(room, lambda e: "Started a new conversation" in str(e))
            turns["first"].append(await turn(f"bench-e2e matrix first {number}"))
            turns["follow-up"].append(await turn(f"bench-e2e matrix follow {number}"))
        return turns
    finally:
        if daemon is not None:
            daemon.stop()
        for person in people:
            await person.close()
        await asyncio.to_thread(server.stop)


def _agent_section(api: FakeAnthropic) -> dict[str, Any]:
    """The real Claude Code CLI with warm sessions, as shipped."""
    env = {**AGENT_ENV, "ANTHROPIC_BASE_URL": api.base_url}
    return {"env": env, "max_warm_sessions": 4, "timeout_seconds": 180}


def run(root: Path, rounds: int, *, sandbox: str = "podman") -> Section:
    section = Section("end to end: a follow-up against running the agent by hand")
    root.mkdir(parents=True, exist_ok=True)
    api = FakeAnthropic()
    api.start()
    repo = make_repo(root / "repo")
    sandbox_section, names = _sandbox(sandbox, root)
    names_to_remove = [names]
    chat: GatewayProcess | None = None
    try:
        config = write_config(
            root, repo, api, sandbox=sandbox_section, channels={"console": {}},
            agent=_agent_section(api),
        )  # fmt: skip
        chat = GatewayProcess("chat", "--config", str(config), env={"PYTHONDONTWRITEBYTECODE": ""})
        chat.send("bench-e2e warm-up")  # (the daemon's own first task: image, proxy; untimed)
        chat.expect(r"^agent> Echo: bench-e2e warm-up$", timeout=600)
        gateway: dict[str, list[dict[str, float]]] = {"first": [], "follow-up": []}
        hand: dict[str, list[float]] = {"first": [], "follow-up": []}
        for number in range(rounds):
            if number % 2:
                for turn, seconds in _by_hand(api, repo, root, number).items():
                    hand[turn].append(seconds)
            chat.send("/new")
            chat.expect(r"Started a new conversation", timeout=60)
            gateway["first"].append(_turn(chat, f"bench-e2e first {number}"))
            gateway["follow-up"].append(_turn(chat, f"bench-e2e follow {number}"))
            if not number % 2:
                for turn, seconds in _by_hand(api, repo, root, number).items():
                    hand[turn].append(seconds)
        chat.close_input()
        chat.process.wait(120)
        (root / "matrix").mkdir()
        matrix_sandbox, matrix_names = _sandbox(sandbox, root / "matrix")  # its own deployment
        names_to_remove.append(matrix_names)
        matrix = asyncio.run(_matrix_turns(root, api, repo, matrix_sandbox, rounds))
        state = root / "state"
        tasks, agent = _tasks(state), _agent_durations(state)
        breakdown = {
            turn: _breakdown(turn, samples, tasks, agent, rounds)
            for turn, samples in gateway.items()
        }
        medians = {t: statistics.median(s["s"] for s in gateway[t]) for t in gateway}
        hand_medians = {t: statistics.median(v) for t, v in hand.items()}
        section.rows = [
            ratio_row("e2e follow-up, console (warm session)", medians["follow-up"] * 1000,
                      hand_medians["follow-up"] * 1000, "claude -p --resume by hand", 0.3,
                      "ms"),
            ratio_row("e2e first turn, console (new conversation)", medians["first"] * 1000,
                      hand_medians["first"] * 1000, "claude -p by hand", 1.5, "ms"),
        ]  # fmt: skip
        matrix_medians = {t: statistics.median(s["s"] for s in matrix[t]) for t in matrix}
        section.rows += [
            ratio_row("e2e follow-up, Matrix on Synapse (warm session)",
                      matrix_medians["follow-up"] * 1000, hand_medians["follow-up"] * 1000,
                      "claude -p --resume by hand", 0.3, "ms"),
            ratio_row("e2e first turn, Matrix on Synapse (new conversation)",
                      matrix_medians["first"] * 1000, hand_medians["first"] * 1000,
                      "claude -p by hand", 1.5, "ms"),
        ]  # fmt: skip
        for turn, parts in breakdown.items():
            section.rows.append(_breakdown_row(turn, parts))
        section.details = {
            "rounds": rounds, "sandbox": sandbox, "gateway_s": gateway, "by_hand_s": hand,
            "matrix_s": matrix,
            "breakdown_median_ms": breakdown,
        }  # fmt: skip
        return section
    finally:
        if chat is not None and chat.process.poll() is None:
            chat.process.kill()
        api.stop()
        for each in names_to_remove:
            _remove(each)


def _breakdown(
    turn: str,
    samples: list[dict[str, float]],
    tasks: dict[str, dict[str, float]],
    agent: dict[str, float],
    rounds: int,
) -> dict[str, float]:
    word = "first" if turn == "first" else "follow"
    parts: dict[str, list[float]] = {"to store": [], "to run": [], "agent": [], "rest": []}
    for number, sample in zip(range(rounds), samples, strict=True):
        prompt = f"bench-e2e {word} {number}"
        task = tasks.get(prompt)
        if task is None or not task["started"]:
            continue
        parts["to store"].append(task["created"] - sample["sent"])
        parts["to run"].append(task["started"] - task["created"])
        run = sample["seen"] - task["started"]
        own = agent.get(prompt, 0.0)
        parts["agent"].append(own)
        parts["rest"].append(run - own)
    return {k: round(statistics.median(v) * 1000, 1) for k, v in parts.items() if v}


def _breakdown_row(turn: str, parts: dict[str, float]) -> Row:
    text = ", ".join(f"{name} {ms:.0f} ms" for name, ms in parts.items())
    return info_row(f"e2e {turn}: where the time goes (medians)", sum(parts.values()), "ms",
                    text + " (rest: the CLI's start when cold, workspace, container, the runner,"
                    " the reply's commit and print)")  # fmt: skip


def main() -> None:
    import argparse

    from bench.report import table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sandbox", default="podman", choices=("podman", "none"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gwb-bench-e2e-") as tmp:
        print(table([run(Path(tmp), args.rounds, sandbox=args.sandbox)]))


if __name__ == "__main__":
    main()
