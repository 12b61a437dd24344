"""Run every benchmark, print one table, write JSON.

    uv run --frozen python -m bench [--quick] [--only matrix,slack,...] [--json PATH]
        [--baseline PATH]

Each benchmark measures its comparison (floor, baseline) in the same run. Numbers depend on
the machine; ratios are the headline. ``--quick`` uses small counts for development.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from bench.report import LoadSampler, Section, table, write_json

RESULTS = Path(__file__).with_name("results")


BASELINE: Path | None = None
"""``--baseline DIR``: another checkout (with its own ``.venv``) whose daemon the matrix and
slack benchmarks run beside this one's, in the same run (before/after a change)."""


def _matrix(quick: bool, root: Path, trace: bool) -> Section:
    from bench import matrix_ack

    return matrix_ack.run(20 if quick else 200, root, trace=trace, baseline=BASELINE)


def _slack(quick: bool, root: Path, trace: bool) -> Section:
    from bench import slack_ack

    return slack_ack.run(20 if quick else 200, root, trace=trace, baseline=BASELINE)


def _sandbox(quick: bool, root: Path, trace: bool) -> Section:
    from bench import sandbox_overhead

    return sandbox_overhead.run(3 if quick else 5)


def _scale(quick: bool, root: Path, trace: bool) -> Section:
    from bench import scale

    return scale.run(root, conversations=20 if quick else 200, tasks=50 if quick else 400)


def _restart(quick: bool, root: Path, trace: bool) -> Section:
    from bench import restart_recovery

    return restart_recovery.run(root, 6 if quick else 50, trace=trace)


def _startup(quick: bool, root: Path, trace: bool) -> Section:
    from bench import startup

    return startup.run(root, 2 if quick else 7)


def _dashboard_lists(quick: bool, root: Path, trace: bool) -> Section:
    from bench import dashboard_lists

    if quick:
        return dashboard_lists.run(root, tasks=5_000, conversations=100)
    return dashboard_lists.run(root)


def _e2e(quick: bool, root: Path, trace: bool) -> Section:
    from bench import e2e_followup

    return e2e_followup.run(root, 2 if quick else 5)


BENCHMARKS: dict[str, Callable[[bool, Path, bool], Section]] = {
    "matrix": _matrix,
    "slack": _slack,
    "sandbox": _sandbox,
    "restart": _restart,
    "scale": _scale,
    "startup": _startup,
    "dashboard-lists": _dashboard_lists,
    "e2e": _e2e,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts (development)")
    parser.add_argument("--only", default="", help="comma-separated: " + ",".join(BENCHMARKS))
    parser.add_argument(
        "--trace", action="store_true",
        help="trace the daemon's calls and print where an acknowledgement's time goes "
        "(slows the daemon: not for the headline numbers)",
    )  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep each benchmark's temp dir")
    parser.add_argument("--json", type=Path, default=None, help="where to write the results")
    parser.add_argument(
        "--baseline", "--baseline-checkout", dest="baseline", type=Path, default=None,
        help="matrix, slack: also run this checkout's daemon (its own .venv) in the same "
        "rounds as this one's, for a before/after at the same machine load",
    )  # fmt: skip
    args = parser.parse_args()
    global BASELINE
    BASELINE = args.baseline.resolve() if args.baseline else None
    chosen = [n.strip() for n in args.only.split(",") if n.strip()] or list(BENCHMARKS)
    sections: list[Section] = []
    for name in chosen:
        started = time.monotonic()
        print(f"== {name} ...", flush=True)
        tmp = tempfile.mkdtemp(prefix=f"gwb-bench-{name}-")
        load = LoadSampler()
        try:
            with load:
                section = BENCHMARKS[name](args.quick, Path(tmp), args.trace)
        except Exception as exc:
            traceback.print_exc()
            section = Section(name, error=f"{type(exc).__name__}: {exc}")
        finally:
            if args.keep:
                print(f"kept {tmp}")
            else:
                shutil.rmtree(tmp, ignore_errors=True)
        section.details["wall_s"] = round(time.monotonic() - started, 1)
        section.details["load_average_1m"] = {"range": load.range, "mean": load.mean}
        for row in section.rows:
            if row.load is None:  # (a benchmark may time a row's own part of its run)
                row.load = load.range
        sections.append(section)
        print(table([section]), flush=True)
    print()
    print(table(sections))
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = args.json or RESULTS / f"bench-{'quick-' if args.quick else ''}{stamp}.json"
    write_json(sections, path, {"quick": args.quick, "only": chosen})
    print(f"\nJSON: {path}")


if __name__ == "__main__":
    main()
