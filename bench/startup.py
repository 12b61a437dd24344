"""Start-up cost (docs/benchmarks.md, restart recovery): what every start of the daemon,
``chat`` and ``gateway-bot --help`` pays before doing anything, optionally against older code.

    uv run --frozen python -m bench.startup [--before OLD/src] [--runs N] [--json PATH]

Per source tree (``--before``: another checkout's ``src``, e.g. main's, run with this
checkout's virtualenv, the same libraries), interleaved round by round so both see the same
load:
- the CPU time of ``import gateway_bot.cli`` (what every command imports first);
- the wall time of ``python -m gateway_bot --help`` (the interpreter's start included);
- for a console + SQLite + ``sandbox: none`` config and for a Matrix + podman config, the
  wall time from spawning ``gateway-bot run`` to its first log line and to its control
  socket (``control socket at``: every part started). The Matrix homeserver is unreachable
  (the listener starts and retries; its library is imported all the same), and each config
  is started once before measuring, so the database migrations of a first start do not
  count: these are restarts.

Each is measured twice: without a bytecode cache (as the test suite and the benchmarks run
here: ``PYTHONDONTWRITEBYTECODE=1`` and no ``.pyc`` in the virtualenv, so every import
compiles its source) and with one (an ordinary install: Python writes ``.pyc`` files on
first import; here into a ``PYTHONPYCACHEPREFIX`` of the benchmark's own, filled by an
unmeasured first start).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from tests.conftest import gateway_env, make_repo

from bench.daemon import TRIVIAL_AGENT
from bench.report import Row, Section, info_row, table, write_json

THIS_SRC = Path(__file__).resolve().parent.parent / "src"
IMPORT_CPU = (
    "import time; started = time.process_time(); import gateway_bot.cli; "
    "print(time.process_time() - started)"
)


def _config(root: Path, repo: Path, kind: str) -> Path:
    channels: dict[str, Any] = {"console": {}}
    sandbox = {"kind": "none"}
    if kind == "matrix-podman":
        channels = {
            "matrix": {
                "homeserver": "http://127.0.0.1:1",
                "user_id": "@bot:localhost",
                "access_token": "unused",
                "allowed_users": ["@alice:localhost"],
            }
        }
        sandbox = {"kind": "podman"}
    root.mkdir(parents=True, exist_ok=True)
    config = {
        "state_dir": str(root / "state"),
        "repo": {"url": str(repo)},
        "agent": {
            "command": ["/bin/sh", str(TRIVIAL_AGENT)],
            "max_warm_sessions": 0,
            "env": {"ANTHROPIC_API_KEY": "unused", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"},
        },
        "channels": channels,
        "sandbox": sandbox,
    }
    path = root / "gateway-bot.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _env(src: Path, cache: Path | None) -> dict[str, str]:
    """``cache``: where .pyc files are written and read; None: no bytecode cache at all."""
    env = {**gateway_env(), "PYTHONPATH": str(src)}
    if cache is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def _import_cpu(env: dict[str, str]) -> float:
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_CPU], env=env, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    return float(done.stdout.strip())


def _help_wall(env: dict[str, str]) -> float:
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "gateway_bot", "--help"], env=env, check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return time.monotonic() - started


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds the process has used so far (robust on a loaded machine,
    where wall times mostly measure the other processes)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _daemon_start(env: dict[str, str], config: Path) -> tuple[float, float, float]:
    """Seconds from spawn to the first log line and to ``control socket at``, and the CPU
    seconds the daemon had used by then; then SIGTERM."""
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway_bot", "run", "--config", str(config)],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    first: float | None = None
    serving: float | None = None
    cpu = 0.0
    lines: list[str] = []
    try:
        for line in process.stdout:
            lines.append(line)
            now = time.monotonic() - started
            first = first if first is not None else now
            if "control socket at" in line:
                serving = now
                cpu = _cpu_s(process.pid)
                break
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.communicate()
    if first is None or serving is None:
        raise RuntimeError(f"the daemon did not start ({config}):\n{''.join(lines[-20:])}")
    return first, serving, cpu


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def run(root: Path, runs: int, before: Path | None = None) -> Section:
    trees = {"after": THIS_SRC, **({"before": before} if before is not None else {})}
    repo = make_repo(root / "repo")
    kinds = ("console-host", "matrix-podman")
    configs = {
        (tree, kind): _config(root / tree / kind, repo, kind) for tree in trees for kind in kinds
    }
    envs = {
        (tree, mode): _env(src, None if mode == "no-pyc" else root / tree / "pycache")
        for tree, src in trees.items()
        for mode in ("no-pyc", "pyc")
    }
    for (tree, _), env in envs.items():  # migrates, writes the .pyc: not measured
        for kind in kinds:
            _daemon_start(env, configs[(tree, kind)])
    samples: dict[str, dict[str, list[float]]] = {}
    for _ in range(runs):
        for (tree, mode), env in envs.items():
            got = samples.setdefault(f"{tree} {mode}", {})
            got.setdefault("import_cli_cpu_s", []).append(_import_cpu(env))
            got.setdefault("help_wall_s", []).append(_help_wall(env))
            for kind in kinds:
                first, serving, cpu = _daemon_start(env, configs[(tree, kind)])
                got.setdefault(f"{kind}_first_log_s", []).append(first)
                got.setdefault(f"{kind}_serving_s", []).append(serving)
                got.setdefault(f"{kind}_cpu_to_serving_s", []).append(cpu)
    medians = {name: {k: _median(v) for k, v in got.items()} for name, got in samples.items()}
    rows: list[Row] = []
    for mode in ("no-pyc", "pyc"):
        for key, value in medians[f"after {mode}"].items():
            if key.endswith("_serving_s") and "cpu" not in key:
                continue  # within milliseconds of the first line: in the JSON only
            name = f"startup {key.removesuffix('_s')} ({mode})"
            if before is None:
                rows.append(info_row(name, value, "s"))
            else:
                old = medians[f"before {mode}"][key]
                rows.append(Row(name, value, "s", old, "before", "", None))
    return Section(
        "startup", rows, {"runs": runs, "before_src": str(before), "medians": medians,
                          "samples": samples},
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="another checkout's src directory")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--root", type=Path, default=Path("/tmp/gwb-bench-startup"))
    args = parser.parse_args()
    started = time.monotonic()
    section = run(args.root, args.runs, args.before.resolve() if args.before else None)
    section.details["wall_s"] = round(time.monotonic() - started, 1)
    print(table([section]))
    if args.json:
        write_json([section], args.json, {"only": ["startup"], "runs": args.runs})
        print(f"JSON: {args.json}")


if __name__ == "__main__":
    main()
