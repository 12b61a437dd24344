"""What a hung test was waiting for: shortly before pytest-timeout fails a test, every
thread's stack and every pending asyncio task's stack go to stderr, which pytest shows
with the failure (also from an xdist worker).

pytest-timeout's own report shows only where the main thread is, which for an asyncio test
is the event loop's ``select``: it says nothing of the coroutine that never woke. A hang
seen once in CI and never here is only fixable from such a report.
"""

from __future__ import annotations

import asyncio
import gc
import io
import sys
import threading
import traceback
from collections.abc import Iterator

import pytest

MARGIN_S = 15.0
"""How long before the test's timeout the report is written."""


def _timeout_of(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    try:
        return float(item.config.getini("timeout") or 0)
    except (ValueError, KeyError):
        return 0.0


def _pending_tasks() -> list[asyncio.Task[object]]:
    """Every unfinished task of any loop (the test's loop is not reachable from here)."""
    found: list[asyncio.Task[object]] = []
    for thing in gc.get_objects():
        if isinstance(thing, asyncio.Task) and not thing.done():
            found.append(thing)
    return found


def report(title: str) -> str:
    out = io.StringIO()
    out.write(f"==== {title}: threads ====\n")
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        out.write(f"-- thread {names.get(ident, ident)}\n")
        out.write("".join(traceback.format_stack(frame)))
    out.write(f"==== {title}: pending asyncio tasks ====\n")
    for task in _pending_tasks():
        out.write(f"-- {task!r}\n")
        try:
            task.print_stack(file=out)
        except Exception as exc:  # a stack read from another thread may be mid-change
            out.write(f"   (stack not readable: {exc!r})\n")
    return out.getvalue()


@pytest.fixture(autouse=True)
def _report_a_hang(request: pytest.FixtureRequest) -> Iterator[None]:
    timeout = _timeout_of(request.node)
    if timeout <= MARGIN_S * 2:
        yield
        return
    name = request.node.nodeid

    def write() -> None:
        sys.stderr.write(report(f"{name} still running {timeout - MARGIN_S:.0f} s in"))
        sys.stderr.flush()

    timer = threading.Timer(timeout - MARGIN_S, write)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
