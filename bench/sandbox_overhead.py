"""Per-task sandbox overhead: exec into a warm container vs. set everything up per task.

    uv run python -m bench.sandbox_overhead [--runs 5]     (also part of ``python -m bench``)

Both modes run the same trivial agent call (the real ``claude -p`` against the fake model
API, reached through the egress proxy) and a no-op (``true``), through gateway-bot's own
Podman sandbox:

* warm: the conversation's container, network and proxy already exist; a task is one exec.
* cold: what per-message sandboxes do: a new network, a new proxy container and a new agent
  container for every message (timed until the call returns; the teardown afterwards is
  reported separately).
* host: the same agent call with no sandbox at all (the fake API reached directly): the
  agent's own time, subtracted from both to give each mode's *overhead*.

Prints medians and their ratio. Needs podman and the images (scripts/setup.sh). Not a test:
numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tests.support.fake_anthropic import FakeAnthropic
from tests.support.sandbox_fixtures import Relay

from bench.report import Section, at_least_ratio_row, info_row
from gateway_bot.agents.claude.runner import QUIET_ENV
from gateway_bot.config.sandbox import SandboxSettings
from gateway_bot.config.server import build_server_config
from gateway_bot.runtime.agent_setup import agent_image_files
from gateway_bot.sandbox.base import ExecutionContext
from gateway_bot.sandbox.egress.allowlist import parse_allowlist, rule_for_url
from gateway_bot.sandbox.host import HostSandbox
from gateway_bot.sandbox.podman.sandbox import PodmanSandbox

CLAUDE = ["claude", "-p", "--output-format", "stream-json", "--verbose",
          "--dangerously-skip-permissions"]  # fmt: skip
NOOP = ["true"]


def _context(root: Path, context_id: str, model_url: str) -> ExecutionContext:
    dirs = {
        name: root / context_id / name
        for name in ("workspace", "home", "inbox", "outbox", "storage")
    }
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    return ExecutionContext(
        id=context_id,
        allowlist=parse_allowlist(None, [rule_for_url(model_url)]),
        network_log=root / context_id / "network.log",
        workspace=dirs["workspace"],
        home=dirs["home"],
        inbox=dirs["inbox"],
        outbox=dirs["outbox"],
        storage=dirs["storage"],
    )


async def _one_call(
    sandbox: PodmanSandbox | HostSandbox,
    context: ExecutionContext,
    argv: Sequence[str],
    env: dict[str, str],
) -> float:
    started = time.perf_counter()
    process = await sandbox.start(context, argv, env, stdin_data=b"say hello")
    async for _ in process.stdout:
        pass
    code = await process.wait()
    elapsed = time.perf_counter() - started
    if code != 0:
        raise RuntimeError(f"{argv[0]} failed in the sandbox: {await process.read_stderr()}")
    return elapsed


def _settings(deployment: str, egress: str) -> SandboxSettings:
    return SandboxSettings(kind="podman", deployment=deployment, egress_network=egress)


async def _remove(deployment: str) -> None:
    """Everything the deployment made: containers, then networks."""

    def remove() -> None:
        label = f"label=gateway-bot.deployment={deployment}"
        if ids := _podman("ps", "-aq", "--filter", label).split():
            _podman("rm", "-f", "-t", "0", *ids)
        if networks := _podman("network", "ls", "-q", "--filter", label).split():
            _podman("network", "rm", "-f", *networks)

    await asyncio.to_thread(remove)


def _podman(*args: str) -> str:
    done = subprocess.run(["podman", *args], capture_output=True, text=True, check=False)
    return done.stdout


def _create_egress_network() -> tuple[str, str]:
    """The proxies' way out, made for this run; the fake API's relay listens on its gateway."""
    name = f"gwb-bench-egress-{secrets.token_hex(3)}"
    _podman("network", "create", "--disable-dns", name)
    gateway = _podman(
        "network", "inspect", "--format", "{{range .Subnets}}{{.Gateway}}{{end}}", name
    ).strip()
    return name, gateway


async def measure(runs: int) -> dict[str, dict[str, list[float]]]:
    results: dict[str, dict[str, list[float]]] = {
        "warm": {}, "cold": {}, "teardown": {}, "host": {},
    }  # fmt: skip
    files = agent_image_files(build_server_config({"repo": {"url": "."}}, "bench"))
    egress, gateway = await asyncio.to_thread(_create_egress_network)
    fake = FakeAnthropic()
    fake.start()
    relay = Relay(gateway, int(fake.base_url.rsplit(":", 1)[1]))
    env = {**QUIET_ENV, "ANTHROPIC_BASE_URL": relay.url, "ANTHROPIC_API_KEY": "bench",
           "CLAUDE_CODE_MAX_RETRIES": "0", "CLAUDE_CONFIG_DIR": "/home/agent/.claude"}  # fmt: skip
    warm_deployment = f"bench-warm-{secrets.token_hex(3)}"
    try:
        with tempfile.TemporaryDirectory(prefix="gwb-bench-") as tmp:
            root = Path(tmp)
            warm = PodmanSandbox(_settings(warm_deployment, egress), root / "warm", files)
            # Container names come from context ids: one of this run's own (a run cut short
            # leaves its container; the next run must not meet it).
            context = _context(root / "warm", f"benchwarm{warm_deployment[-6:]}", relay.url)
            await _one_call(warm, context, CLAUDE, env)  # creates everything once: not timed
            for label, argv in (("agent call", CLAUDE), ("no-op", NOOP)):
                results["warm"][label] = [
                    await _one_call(warm, context, argv, env) for _ in range(runs)
                ]

            host_context = _context(root / "host", "benchhost", fake.base_url)
            host_env = {**env, "ANTHROPIC_BASE_URL": fake.base_url,
                        "CLAUDE_CODE_MAX_RETRIES": "0", "IS_SANDBOX": "1",
                        "CLAUDE_CONFIG_DIR": str(host_context.home / ".claude")}  # fmt: skip
            host = HostSandbox()
            await _one_call(host, host_context, CLAUDE, host_env)  # first run: not timed
            for label, argv in (("agent call", CLAUDE), ("no-op", NOOP)):
                results["host"][label] = [
                    await _one_call(host, host_context, argv, host_env) for _ in range(runs)
                ]

            for label, argv in (("agent call", CLAUDE), ("no-op", NOOP)):
                cold_times, teardown_times = [], []
                for run in range(runs):
                    deployment = f"bench-cold-{secrets.token_hex(3)}"
                    state = root / f"cold-{label[0]}{run}"
                    cold = PodmanSandbox(_settings(deployment, egress), state, files)
                    cold_times.append(
                        await _one_call(
                            cold,
                            _context(state, f"cold{deployment[-6:]}{run}", relay.url),
                            argv,
                            env,
                        )
                    )
                    started = time.perf_counter()
                    await _remove(deployment)
                    teardown_times.append(time.perf_counter() - started)
                results["cold"][label] = cold_times
                results["teardown"][label] = teardown_times
    finally:
        await _remove(warm_deployment)
        relay.close()
        fake.stop()
        await asyncio.to_thread(_podman, "network", "rm", "-f", egress)
    return results


def print_table(results: dict[str, dict[str, list[float]]], runs: int) -> None:
    columns = ("agent call", "no-op")
    med = {mode: {c: statistics.median(results[mode][c]) for c in columns} for mode in results}
    rows = [
        ("warm: exec into the conversation's container", med["warm"]),
        ("cold: new network + proxy + container per task", med["cold"]),
    ]
    print(f"Per-task sandbox time, median of {runs} runs (seconds)\n")
    print(f"{'mode':<50}{'agent call':>12}{'no-op':>10}")
    for name, values in rows:
        print(f"{name:<50}{values['agent call']:>12.2f}{values['no-op']:>10.2f}")
    ratio = {c: med["cold"][c] / med["warm"][c] for c in columns}
    print(f"{'ratio cold / warm':<50}{ratio['agent call']:>11.1f}x{ratio['no-op']:>9.1f}x")
    print(f"{'(cold teardown afterwards, not included)':<50}"
          f"{med['teardown']['agent call']:>12.2f}{med['teardown']['no-op']:>10.2f}")  # fmt: skip


def section(results: dict[str, dict[str, list[float]]], runs: int) -> Section:
    med = {m: {c: statistics.median(v) for c, v in results[m].items()} for m in results}
    rows = []
    for label in ("no-op", "agent call"):
        own = med["host"][label]
        warm, cold = med["warm"][label] - own, med["cold"][label] - own
        rows.append(
            at_least_ratio_row(
                f"sandbox overhead per task, {label} (warm)", warm * 1000, cold * 1000,
                "per-task network+proxy+container", 10, "ms",
            )
        )  # fmt: skip
    rows.append(
        info_row(
            "agent call total, warm container", med["warm"]["agent call"] * 1000, "ms",
            f"host {med['host']['agent call'] * 1000:.0f} ms, "
            f"cold {med['cold']['agent call'] * 1000:.0f} ms",
        )
    )  # fmt: skip
    return Section(
        "sandbox overhead",
        rows,
        {"runs": runs, "median_s": med,
         "overhead_definition": "median(mode) - median(host, same call)",
         "samples_s": results},
    )  # fmt: skip


def run(runs: int) -> Section:
    return section(asyncio.run(measure(runs)), runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print_table(asyncio.run(measure(args.runs)), args.runs)


if __name__ == "__main__":
    main()
