"""Where an acknowledgement's time goes, from a bench/traced_daemon.py trace file.

For each acknowledgement (``*.send_acknowledgement``), the window opens when the event that
caused it was handed over (the end of the sync / socket read that preceded it) and closes
when the acknowledgement call returns. Every traced call starting in the window is listed
with its median offset from the window's start and median duration, in order.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any


def breakdown(trace: Path, opener: str, skip: int = 3, edge: str = "end") -> list[dict[str, Any]]:
    """``edge``: the window opens at the opener's ``end`` (a sync returned) or ``start``."""
    calls = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
    calls.sort(key=lambda c: c["start"])
    acks = [c for c in calls if c["call"].endswith(".send_acknowledgement")][skip:]
    openers = [c for c in calls if c["call"] == opener]
    offsets: dict[str, list[float]] = defaultdict(list)
    durations: dict[str, list[float]] = defaultdict(list)
    for ack in acks:
        before = [o for o in openers if o[edge] <= ack["start"]]
        if not before:
            continue
        t0 = before[-1][edge]
        seen: set[str] = set()
        for call in calls:
            if t0 <= call["start"] <= ack["end"] and call["call"] not in seen:
                seen.add(call["call"])
                offsets[call["call"]].append((call["start"] - t0) * 1000)
                durations[call["call"]].append((call["end"] - call["start"]) * 1000)
    rows: list[dict[str, Any]] = [
        {
            "call": name,
            "n": len(offsets[name]),
            "median_start_ms": round(statistics.median(offsets[name]), 2),
            "median_duration_ms": round(statistics.median(durations[name]), 2),
        }
        for name in offsets
    ]
    rows.sort(key=lambda r: float(r["median_start_ms"]))
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'call (first in each window)':<52}{'n':>5}{'start ms':>10}{'took ms':>10}"]
    lines += [
        f"{r['call']:<52}{r['n']:>5}{r['median_start_ms']:>10.1f}{r['median_duration_ms']:>10.1f}"
        for r in rows
    ]
    return "\n".join(lines)


def totals(trace: Path, since: float = 0.0) -> list[dict[str, Any]]:
    """Every traced call from ``since`` (monotonic) on: how many, the median and the sum of
    their durations, busiest first. Sums overlap (a call contains the calls it makes, and
    tasks run side by side): they say where waiting piles up, not CPU."""
    calls = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
    spans: dict[str, list[float]] = defaultdict(list)
    for call in calls:
        if call["start"] >= since:
            spans[call["call"]].append((call["end"] - call["start"]) * 1000)
    rows: list[dict[str, Any]] = [
        {"call": name, "n": len(took), "median_ms": round(statistics.median(took), 1),
         "sum_ms": round(sum(took))}
        for name, took in spans.items()
    ]  # fmt: skip
    rows.sort(key=lambda r: -float(r["sum_ms"]))
    return rows


def render_totals(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'call':<52}{'n':>6}{'median ms':>11}{'sum ms':>10}"]
    lines += [f"{r['call']:<52}{r['n']:>6}{r['median_ms']:>11.1f}{r['sum_ms']:>10}" for r in rows]
    return "\n".join(lines)
