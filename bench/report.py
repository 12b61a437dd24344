"""One row per comparison, printed as one table and written as JSON.

A row holds what was measured and what it is compared with *in the same run* (a floor, a
baseline); the ratio is the headline, the target is the issue's (docs/benchmarks.md), and a row
without a comparison (an absolute budget: RSS, tasks per second) compares against its
budget instead.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Row:
    benchmark: str
    measured: float
    unit: str
    baseline: float | None
    """The floor or baseline of the same run; None for an absolute budget."""
    baseline_name: str
    target: str
    """Human-readable, e.g. ``<= 1.15x`` or ``<= 200 MB``."""
    passed: bool | None
    """None: informational (no target)."""
    ratio: float | None = None
    note: str = ""
    load: tuple[float, float] | None = None
    """The machine's 1-minute load average over the row's run (lowest, highest): set by
    ``bench/__main__.py`` from samples taken while the benchmark ran."""

    def __post_init__(self) -> None:
        if self.ratio is None and self.baseline:
            self.ratio = self.measured / self.baseline


def ratio_row(
    benchmark: str, measured: float, baseline: float, baseline_name: str, limit: float, unit: str
) -> Row:
    """measured / baseline must be at most ``limit``."""
    return Row(
        benchmark, measured, unit, baseline, baseline_name, f"<= {limit:g}x",
        measured / baseline <= limit,
    )  # fmt: skip


def at_least_ratio_row(
    benchmark: str, measured: float, baseline: float, baseline_name: str, limit: float, unit: str
) -> Row:
    """baseline / measured (how many times cheaper) must be at least ``limit``."""
    return Row(
        benchmark, measured, unit, baseline, baseline_name, f">= {limit:g}x",
        baseline / measured >= limit, ratio=baseline / measured,
    )  # fmt: skip


def budget_row(
    benchmark: str, measured: float, unit: str, limit: float, *, at_least: bool = False
) -> Row:
    ok = measured >= limit if at_least else measured <= limit
    sign = ">=" if at_least else "<="
    return Row(benchmark, measured, unit, None, "", f"{sign} {limit:g} {unit}", ok)


def info_row(benchmark: str, measured: float, unit: str, note: str = "") -> Row:
    return Row(benchmark, measured, unit, None, "", "", None, note=note)


@dataclass
class Section:
    """One benchmark's rows plus its raw numbers (every sample, breakdowns) for the JSON."""

    name: str
    rows: list[Row] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def _number(value: float, unit: str) -> str:
    text = f"{value:.1f}" if abs(value) < 1000 else f"{value:.0f}"
    return f"{text} {unit}".strip()


def _load(load: tuple[float, float] | None) -> str:
    if load is None:
        return ""
    low, high = load
    return f"{low:.1f}" if round(low, 1) == round(high, 1) else f"{low:.1f}-{high:.1f}"


class LoadSampler:
    """The 1-minute load average, sampled every second in a thread while a benchmark runs:
    every row says how busy the machine was during its own run (only ratios of one run
    compare, and the load says how far to trust even those)."""

    def __init__(self, every_s: float = 1.0) -> None:
        self._every = every_s
        self._samples = [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="load-sampler", daemon=True)

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._samples.append(os.getloadavg()[0])

    def _sample(self) -> None:
        while not self._stop.wait(self._every):
            self._samples.append(os.getloadavg()[0])

    @property
    def range(self) -> tuple[float, float]:
        return (round(min(self._samples), 2), round(max(self._samples), 2))

    @property
    def mean(self) -> float:
        return round(sum(self._samples) / len(self._samples), 2)


def table(sections: list[Section]) -> str:
    header = ("benchmark", "measured", "floor / baseline", "ratio", "target", "result", "load 1m")
    lines: list[tuple[str, ...]] = []
    for section in sections:
        if section.error:
            lines.append(
                (f"{section.name}: FAILED TO RUN", section.error[:60], "", "", "", "ERROR", "")
            )
        for row in section.rows:
            base = (
                f"{_number(row.baseline, row.unit)} ({row.baseline_name})"
                if row.baseline is not None
                else ""
            )
            result = "" if row.passed is None else ("pass" if row.passed else "MISS")
            lines.append(
                (
                    row.benchmark,
                    _number(row.measured, row.unit),
                    base,
                    f"{row.ratio:.2f}x" if row.ratio is not None else "",
                    row.target,
                    result,
                    _load(row.load),
                )
            )
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines]
    notes = [f"  * {r.benchmark}: {r.note}" for s in sections for r in s.rows if r.note]
    return "\n".join(out + notes)


def machine() -> dict[str, Any]:
    def run(*argv: str) -> str:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in run("lscpu").splitlines()
            if line.startswith("Model name")
        ),
        "",
    )
    os_name = ""
    if Path("/etc/os-release").exists():
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip('"')
    return {
        "os": os_name,
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "load_average_at_start": os.getloadavg(),
    }


def write_json(sections: list[Section], path: Path, settings: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "settings": settings,
        "sections": [
            {
                "name": s.name,
                "error": s.error,
                "rows": [asdict(r) for r in s.rows],
                "details": s.details,
            }
            for s in sections
        ],
    }
    path.write_text(json.dumps(document, indent=1, default=str) + "\n")
