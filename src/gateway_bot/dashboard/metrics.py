"""Prometheus metrics at ``/metrics`` on the dashboard's server.

Who may read them without the dashboard's login: a scraper presenting
``dashboard.metrics_token`` as a bearer token, or one connecting from loopback. "From
loopback" is the socket's real peer address, never a header: ``X-Forwarded-For`` is not
read at all. Behind a proxy (``behind_proxy: true``) every request reaches us from the
proxy, usually over loopback, so there the loopback exemption is off and only the token (or
a login) reads them: a proxy that forwards the internet must not make the internet local.
The exemption also needs a ``Host`` header naming loopback (``localhost``, ``127.x``,
``[::1]``): a web page the operator visits can rebind its own name to 127.0.0.1 (DNS
rebinding) and read a loopback URL from their browser, but its requests carry its name.

What they say is read when scraped (agent tasks per state and reason, commands apart from
them, queue depth, containers, channel health, pending approvals: the same answers
``gateway-bot status`` gives), except
the task duration histogram, which this process observes as tasks finish running (the
store's transition hook) and which therefore starts empty at each start of the daemon, and
the step histogram (``TaskSteps``), counted from each finished task's trace once.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import time
from collections import Counter
from collections.abc import Iterable, Iterator

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway_bot.config.dashboard import DashboardSettings
from gateway_bot.core.application import Application
from gateway_bot.dashboard.context import APPLICATION
from gateway_bot.domain.lifecycle import TaskKind, TaskState
from gateway_bot.domain.messages import ChannelHealth
from gateway_bot.domain.records import TaskRecord

log = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
PREFIX = "gateway_bot"
QUEUED_STATES = (TaskState.QUEUED, TaskState.PENDING)
"""Accepted and waiting for a slot (a task held for an approval is AUTHENTICATING and
counted by the approvals gauge instead)."""
DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
STEP_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0)
STEP_WINDOW = 50
"""Each scrape looks at the newest this many finished tasks for ones not yet counted."""


class TaskDurations:
    """How long tasks ran (started to leaving EXECUTING), by how they ended. The daemon
    registers ``observe_transition`` with ``Store.on_transition``."""

    def __init__(self) -> None:
        self.histogram = Histogram(
            f"{PREFIX}_task_duration_seconds",
            "Time a task's agent run took, from start to its end (this daemon's runs).",
            ["reason"],
            buckets=DURATION_BUCKETS,
            registry=None,
        )

    def observe_transition(self, task: TaskRecord, previous: TaskState | None) -> None:
        if previous is not TaskState.EXECUTING or task.started_at is None:
            return
        if task.kind is TaskKind.COMMAND:  # answered at once: no agent run to time
            return
        if task.state is TaskState.COMPLETED:
            reason = task.completion_reason.value if task.completion_reason else "unknown"
        elif task.state is TaskState.UNDELIVERED:
            reason = "undelivered"
        else:  # back to PENDING: requeued (a restart), it will run again
            return
        ended = task.completed_at or time.time()
        self.histogram.labels(reason=reason).observe(max(0.0, ended - task.started_at))


class TaskSteps:
    """How long each kind of step took (``core/conversations/trace.py``'s spans: the task
    page's waterfall, so the page and Prometheus agree), one observation per step of each
    finished task.

    Counted at scrape time, each task once: a scrape traces the tasks among the newest
    ``STEP_WINDOW`` finished that no earlier scrape counted. Why not the whole window at
    every scrape: a histogram's counts must only grow (a window that slides makes them
    shrink, which ``rate()`` reads as a restart). Why not when a task finishes: the trace
    reads the event log and the network log, which the store's synchronous transition hook
    must not wait for. So the counts start at each start of the daemon with up to
    ``STEP_WINDOW`` tasks finished before it, and a burst of more than that many between
    two scrapes counts only the newest. Cost: one trace per finished task, once."""

    def __init__(self) -> None:
        self.histogram = Histogram(
            f"{PREFIX}_task_step_seconds",
            "Time each step of a finished agent task took, by kind (the task page's waterfall).",
            ["step"],
            buckets=STEP_BUCKETS,
            registry=None,
        )
        self._counted: set[str] = set()

    async def catch_up(self, application: Application, now: float) -> None:
        finished = await application.tasks(
            states=[TaskState.COMPLETED, TaskState.UNDELIVERED], limit=STEP_WINDOW
        )
        new = [task for task in finished if task.id not in self._counted]
        # Only the window's ids are kept: a task that left it never comes back.
        self._counted = {task.id for task in finished}
        for task in new:
            if task.started_at is None:  # never ran (cancelled while queued): no steps
                continue
            try:
                trace = await application.task_trace(task.id, now)
            except KeyError:  # removed meanwhile
                continue
            for span in trace.spans:
                self.histogram.labels(step=span.kind).observe(span.duration)


def metrics_readable(
    peer: str | None,
    authorization: str | None,
    settings: DashboardSettings,
    host: str | None = None,
) -> bool:
    """May a request from socket peer ``peer`` with this ``Authorization`` header read the
    metrics without a login? (The rule in the module docstring.)"""
    token = settings.metrics_token
    if token is not None and authorization is not None:
        scheme, _, offered = authorization.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            offered.strip().encode(), token.encode()
        ):
            return True
    if settings.behind_proxy:
        return False
    return peer is not None and _is_loopback(peer) and _names_loopback(host)


def _names_loopback(host: str | None) -> bool:
    """Does a ``Host`` header (``name[:port]``, ``[v6][:port]``) name this machine's
    loopback? A missing header does not."""
    if not host:
        return False
    name = host.strip().lower()
    if name.startswith("["):
        name = name[1 : name.find("]")] if "]" in name else ""
    elif name.count(":") == 1:
        name = name.split(":", 1)[0]
    return name == "localhost" or _is_loopback(name)


def request_peer(request: web.Request) -> str | None:
    """The TCP peer's address as the socket reports it (not ``request.remote``, which
    middlewares may rewrite from headers)."""
    transport = request.transport
    peername = transport.get_extra_info("peername") if transport is not None else None
    if isinstance(peername, tuple) and peername and isinstance(peername[0], str):
        return peername[0]
    return None


def _is_loopback(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


class _Families(Collector):
    """One scrape's families, computed beforehand (the store is async, ``collect`` not)."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


async def scrape(
    application: Application, durations: TaskDurations | None, steps: TaskSteps | None = None
) -> bytes:
    families = [*await _task_families(application), *await _live_families(application)]
    if durations is not None:
        families += list(durations.histogram.collect())
    if steps is not None:
        await steps.catch_up(application, time.time())
        families += list(steps.histogram.collect())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry)


async def _task_families(application: Application) -> list[Metric]:
    counts = await application.task_counts()
    tasks = GaugeMetricFamily(
        f"{PREFIX}_tasks",
        "Agent tasks in the state database by state and, once completed, by reason"
        " (commands: gateway_bot_commands).",
        labels=["state", "reason"],
    )
    by_state: Counter[TaskState] = Counter()
    for (state, reason), count in sorted(counts.items(), key=lambda kv: _order(kv[0])):
        by_state[state] += count
        if state is TaskState.COMPLETED:
            tasks.add_metric([state.value, reason.value if reason else ""], count)
    for state in TaskState:
        if state is not TaskState.COMPLETED:
            tasks.add_metric([state.value, ""], by_state[state])
    queue = GaugeMetricFamily(
        f"{PREFIX}_queue_depth",
        "Tasks accepted and waiting to run (queued or pending).",
        value=sum(by_state[state] for state in QUEUED_STATES),
    )
    return [tasks, queue, await _command_family(application)]


async def _command_family(application: Application) -> Metric:
    commands = GaugeMetricFamily(
        f"{PREFIX}_commands",
        "Commands answered (chat commands, card decisions, typed answers) by how they ended:"
        " apart from the tasks, as they never run the agent.",
        labels=["reason"],
    )
    answered: Counter[str] = Counter()
    for (_, ended), count in (await application.task_counts(TaskKind.COMMAND)).items():
        if ended is not None:  # an answer still on its way is counted once it is done
            answered[ended.value] += count
    for name, count in sorted(answered.items()):
        commands.add_metric([name], count)
    return commands


def _order(key: tuple[TaskState, object]) -> tuple[str, str]:
    state, reason = key
    return state.value, str(getattr(reason, "value", ""))


async def _live_families(application: Application) -> list[Metric]:
    health = GaugeMetricFamily(
        f"{PREFIX}_channel_health",
        "1 for each channel's current health, 0 for the others.",
        labels=["channel", "health"],
    )
    up = GaugeMetricFamily(
        f"{PREFIX}_channel_up", "1 when the channel is connected.", labels=["channel"]
    )
    channels = application.channels()
    for channel in channels:
        for value in ChannelHealth:
            health.add_metric([channel.name, value.value], float(channel.health == value.value))
        up.add_metric([channel.name], float(channel.health == ChannelHealth.CONNECTED.value))
    approvals = GaugeMetricFamily(
        f"{PREFIX}_approvals_pending",
        "Approvals waiting for an owner's decision, by channel.",
        labels=["channel"],
    )
    pending = Counter(a.channel for a in await application.pending_approvals())
    for name in sorted({c.name for c in channels} | set(pending)):
        approvals.add_metric([name], pending[name])
    containers = GaugeMetricFamily(
        f"{PREFIX}_containers",
        "The sandbox's conversation containers by state.",
        labels=["state"],
    )
    listed = GaugeMetricFamily(
        f"{PREFIX}_containers_listed",
        "1 when the sandbox answered the container listing (else the containers gauge is missing).",
    )
    try:
        by_state = Counter(c.state for c in await application.containers())
    except Exception as exc:  # the sandbox's trouble must not hide the other metrics
        log.warning("listing containers for /metrics failed: %s", exc)
        listed.add_metric([], 0)
        return [health, up, approvals, listed]
    for state, count in sorted(by_state.items()):
        containers.add_metric([state], count)
    listed.add_metric([], 1)
    return [health, up, approvals, containers, listed]


DURATIONS = web.AppKey("task_durations", TaskDurations)
"""app[DURATIONS]: the daemon's ``TaskDurations``, when it observes them."""


STEPS = web.AppKey("task_steps", TaskSteps)
"""app[STEPS]: the step histogram (``build_app`` makes one)."""


async def metrics(request: web.Request) -> web.Response:
    body = await scrape(
        request.app[APPLICATION], request.app.get(DURATIONS), request.app.get(STEPS)
    )
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
