"""A test-only hook that moves the schedules' clock, so tests can make a run due now
instead of waiting for it.

Set ``GATEWAY_BOT_TEST_SCHEDULE_CLOCK_FILE`` to a file holding a number of seconds; the
schedule runner (and ``/schedule``, which computes next runs with the runner's clock) then
takes "now" as the real time plus that number, read afresh at each look, and checks at
least every ``POLL_S`` seconds, so a test that writes a larger number sees a due run fire
at once. Nothing else in the daemon (task times, approvals, retention) is moved.

It is not configuration: no config key names it, the variable's name says it is for tests,
the file must exist when the daemon starts (else the hook is refused with a log line), and
the daemon logs a warning while it is in use. A file that cannot be read or parsed
counts as 0 (the real time).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

TEST_CLOCK_ENV = "GATEWAY_BOT_TEST_SCHEDULE_CLOCK_FILE"
POLL_S = 0.5


@dataclass(frozen=True)
class ScheduleTestClock:
    path: Path

    def now(self) -> float:
        try:
            offset = float(self.path.read_text(encoding="ascii").strip() or 0)
        except (OSError, ValueError):
            offset = 0.0
        return time.time() + offset

    async def sleep(self, delay: float) -> None:
        await asyncio.sleep(min(delay, POLL_S))


def schedule_test_clock(environ: Mapping[str, str]) -> ScheduleTestClock | None:
    """The hook when the test variable names an existing file, else None."""
    name = environ.get(TEST_CLOCK_ENV)
    if not name:
        return None
    path = Path(name)
    if not path.is_file():
        log.error("%s=%s is not a file: the schedules use the real clock", TEST_CLOCK_ENV, name)
        return None
    log.warning(
        "TEST HOOK: %s is set: schedules read their clock from %s (tests only)",
        TEST_CLOCK_ENV,
        path,
    )
    return ScheduleTestClock(path)
