"""The dashboard's front page: what runs now, what waits and for which decision, the tasks of
today and of the last seven days (how they ended, the failure rate, how long they ran, what
they cost), the channels' health and the containers with their memory.

Every figure is computed by the store (counts and sums per state, the run times of the
period) or read live, never from a sample, so the page agrees with the lists it links to:
the failed count is what ``/tasks?state=failed`` lists for the same dates. A period counts
the agent tasks accepted in it (commands apart), as the lists' date filter does.

The words a list's state filter takes (``STATE_WORDS``) live here too, beside the
outcomes they group: the front page links to those lists by them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from gateway_bot.core.decisions import PendingDecision, waiting_tasks
from gateway_bot.core.live_state import ChannelView, LiveState, MeasuresLiveContainers
from gateway_bot.domain.lifecycle import CompletionReason, TaskKind, TaskState
from gateway_bot.domain.records import TaskRecord
from gateway_bot.state.store import Store
from gateway_bot.state.task_lists import TaskFilter

log = logging.getLogger(__name__)

DAY_S = 86400
LISTED = 100
"""The front page lists at most this many running and waiting tasks each."""
WAITING = (TaskState.QUEUED, TaskState.AUTHENTICATING, TaskState.PENDING)

OUTCOMES: dict[str, tuple[CompletionReason, ...]] = {
    "succeeded": (CompletionReason.SUCCESS,),
    "failed": (
        CompletionReason.EXECUTION_FAILED,
        CompletionReason.TIMEOUT,
        CompletionReason.INTERNAL_ERROR,
    ),
    "stopped": (CompletionReason.CANCELLED,),
    "refused": (
        CompletionReason.REJECTED,
        CompletionReason.UNAUTHORIZED,
        CompletionReason.AUTH_FAILED,
    ),
}
"""How a finished task ended, in the four words the charts use too."""
STATE_WORDS: dict[str, tuple[tuple[TaskState, ...], tuple[CompletionReason, ...]]] = {
    "running": ((TaskState.EXECUTING,), ()),
    "waiting": (WAITING, ()),
    "undelivered": ((TaskState.UNDELIVERED,), ()),
    **{word: ((), reasons) for word, reasons in OUTCOMES.items()},
}
"""A list's ``state=`` word -> the states, and the completion reasons, it matches."""


def state_filter(word: str) -> tuple[tuple[TaskState, ...], tuple[CompletionReason, ...]]:
    """The states and reasons of a ``state=`` word; an unknown word matches nothing
    (``KeyError``)."""
    return STATE_WORDS[word]


@dataclass(frozen=True)
class Period:
    name: str
    """"today" or "7 days" (today and the six days before it)."""
    since: float
    """Local midnight: a list filtered from that day shows the same tasks."""
    tasks: int
    ended: dict[str, int]
    """Outcome word -> tasks that ended so."""
    unfinished: int
    cost_usd: float
    failure_rate: float | None
    """Per cent of the tasks that ran to an end which failed (None: none ran)."""
    p50_s: float | None
    p95_s: float | None


@dataclass(frozen=True)
class ContainerLine:
    name: str
    conversation_id: str
    state: str
    memory_bytes: int | None


@dataclass(frozen=True)
class FrontPage:
    running: tuple[TaskRecord, ...]
    """Newest first."""
    waiting: tuple[TaskRecord, ...]
    """Oldest first: the longest wait on top."""
    decisions: dict[str, PendingDecision]
    """Task id -> the decision it waits for."""
    periods: tuple[Period, ...]
    channels: tuple[ChannelView, ...]
    containers: tuple[ContainerLine, ...]
    containers_error: str


def start_of_day(now: float) -> float:
    """Local midnight before ``now``."""
    day = time.localtime(now)
    return time.mktime((day.tm_year, day.tm_mon, day.tm_mday, 0, 0, 0, 0, 0, -1))


async def period(store: Store, name: str, since: float) -> Period:
    totals = await store.task_totals(since)
    ended = dict.fromkeys(OUTCOMES, 0)
    words = {reason: word for word, reasons in OUTCOMES.items() for reason in reasons}
    unfinished = 0
    for total in totals:
        if total.reason is not None and total.state is TaskState.COMPLETED:
            ended[words[total.reason]] += total.count
        else:
            unfinished += total.count
    ran = ended["succeeded"] + ended["failed"]
    p50, p95 = await store.run_time_percentiles(since, (50, 95))
    return Period(
        name,
        since,
        sum(total.count for total in totals),
        ended,
        unfinished,
        sum(total.cost_usd for total in totals),
        100 * ended["failed"] / ran if ran else None,
        p50,
        p95,
    )


async def containers(live: LiveState) -> tuple[tuple[ContainerLine, ...], str]:
    """Every container with the memory it uses now (when the sandbox can say), and why the
    list is missing ("" when it is not): the sandbox's trouble must not hide the page."""
    try:
        listed = await live.containers()
    except Exception as exc:
        log.warning("listing containers failed: %s", exc)
        return (), f"{type(exc).__name__}: {exc}"
    lines = []
    for container in listed:
        memory = None
        if container.state == "running" and isinstance(live, MeasuresLiveContainers):
            try:
                memory = await live.container_memory(container.name)
            except Exception as exc:  # one container's trouble hides its memory only
                log.warning("reading %s's memory failed: %s", container.name, exc)
        lines.append(ContainerLine(container.name, container.context_id, container.state, memory))
    return tuple(lines), ""


async def front_page(
    store: Store, live: LiveState, decisions: Sequence[PendingDecision], now: float
) -> FrontPage:
    running = await store.task_page(TaskFilter(states=(TaskState.EXECUTING,)), limit=LISTED)
    waiting = await store.list_tasks(states=WAITING, limit=LISTED, kind=TaskKind.AGENT)
    lines, error = await containers(live)
    return FrontPage(
        running=running.tasks,
        waiting=tuple(waiting),
        decisions=waiting_tasks(decisions),
        periods=(
            await period(store, "today", start_of_day(now)),
            await period(store, "7 days", start_of_day(now - 6 * DAY_S)),
        ),
        channels=tuple(live.channels()),
        containers=lines,
        containers_error=error,
    )
