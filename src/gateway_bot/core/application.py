"""The application API: what the CLI, the chat commands and the dashboard ask of a
deployment, in one place, so each front end is a rendering of the same answers.

Two ways to build it. Inside the daemon (``runtime/daemon.py``) it has the live service: it can stop
a task and decide an approval, and reads channel health and containers from memory. In
another process (``gateway-bot status``) it has the state database opened read-only and a
``LiveState`` read from the daemon's status snapshot (``core/status/snapshot.py``); the
controls then raise ``NotInThisProcess``.

Decisions go through the same ``Gatekeeper.decide`` a card's button or ``/approve`` uses, as
the identity the caller names: the owners' list decides who may, not the front end.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from gateway_bot.core.actions.timeline import action_entries
from gateway_bot.core.conversations.network_log import NetworkLog, read_network_log
from gateway_bot.core.conversations.timeline import (
    ParseLine,
    TaskTimeline,
    TimelineEntry,
    agent_entries,
    ready_at,
    state_entries,
    task_log_lines,
    timed_events,
    with_durations,
)
from gateway_bot.core.conversations.trace import Trace, build_trace
from gateway_bot.core.decisions import PendingDecision, decide, pending_decisions
from gateway_bot.core.live_state import ChannelView, LiveState, MeasuresLiveContainers
from gateway_bot.core.schedules.runner import rule_of
from gateway_bot.core.service import GatewayService
from gateway_bot.core.status import overview as front
from gateway_bot.domain.lifecycle import CompletionReason, TaskKind, TaskState
from gateway_bot.domain.records import ApprovalRecord, ConversationRecord, TaskRecord
from gateway_bot.sandbox.base import SandboxContainer
from gateway_bot.sandbox.context_files import ContextFiles
from gateway_bot.state import task_lists as lists
from gateway_bot.state.schedules_store import PAUSED, SqlSchedules
from gateway_bot.state.store import Store

log = logging.getLogger(__name__)

RECENT = 5
WAITING_STATES = (TaskState.QUEUED, TaskState.AUTHENTICATING, TaskState.PENDING)
"""Accepted, not yet running: being authenticated, held for an approval, or queued."""


class NotInThisProcess(RuntimeError):
    """A control (stop, decide) asked of an application that only reads state."""


@dataclass(frozen=True)
class ContainerView:
    """A conversation's container as the dashboard shows it."""

    name: str
    status: str
    """"running" (a task of the conversation runs in it), "idle" (up, waiting for the next
    task) or "stopped"."""
    runtime_state: str
    created_at: float | None
    memory_bytes: int | None


@dataclass(frozen=True)
class Overview:
    """The answer to "what is going on": ``gateway-bot status``, the dashboard's front page."""

    channels: tuple[ChannelView, ...]
    containers: tuple[SandboxContainer, ...]
    containers_error: str
    """Why the container list is missing ("" when it is not)."""
    running: tuple[TaskRecord, ...]
    waiting: tuple[TaskRecord, ...]
    undelivered: tuple[TaskRecord, ...]
    pending_approvals: tuple[ApprovalRecord, ...]
    finished: tuple[TaskRecord, ...] = ()
    """The newest ``RECENT`` completed agent tasks, newest first."""
    commands: tuple[TaskRecord, ...] = ()
    """The newest ``RECENT`` commands answered (chat commands, card decisions, typed
    answers), newest first: apart from the tasks, which they would crowd out."""
    schedules: tuple[ScheduleView, ...] = ()
    """Every schedule, active or paused (``/schedule``, decision 0068)."""


@dataclass(frozen=True)
class ScheduleView:
    """A schedule as ``status`` and the dashboard show it."""

    id: int
    channel: str
    conversation_key: str
    """Where it posts (a Matrix room or thread, a Slack thread, an email thread)."""
    conversation_id: str | None
    """That place's active conversation now (None before its first message or after a
    cleanup): runs go to it."""
    rule: str
    """The normalized rule, as ``/schedules`` shows it."""
    timezone: str
    next_run: float | None
    paused: bool
    prompt: str
    creator_id: str


@dataclass(frozen=True)
class StopOutcome:
    stopped: bool
    text: str


class Application:
    def __init__(
        self,
        store: Store,
        live: LiveState,
        *,
        service: GatewayService | None = None,
        conversation_root: Callable[[str], Path] | None = None,
        parse_line: ParseLine | None = None,
        schedules: SqlSchedules | None = None,
        context_files: Callable[[str], ContextFiles] | None = None,
    ) -> None:
        """``conversation_root`` and ``parse_line`` (the agent backend's stream parser)
        let timelines show what the agent did; without them they show states only.
        ``schedules``: where schedules are read (by default the live service's)."""
        if schedules is None and service is not None and service.schedules is not None:
            schedules = service.schedules.store
        self._schedules = schedules
        self._store = store
        self._live = live
        self._service = service
        self._conversation_root = conversation_root
        self._context_files = context_files
        """A conversation's files, as its sandbox reaches them (its network log)."""
        self._parse_line = parse_line

    # -- reading ---------------------------------------------------------------------------

    async def conversations(
        self, *, active: bool | None = None, channel: str | None = None, limit: int = 100
    ) -> list[ConversationRecord]:
        return await self._store.list_conversations(active=active, channel=channel, limit=limit)

    async def tasks(
        self,
        *,
        states: Iterable[TaskState] | None = None,
        conversation_id: str | None = None,
        limit: int = 100,
        kind: TaskKind | None = TaskKind.AGENT,
    ) -> list[TaskRecord]:
        """Newest ``limit`` matching agent tasks, oldest first (``kind``: commands instead,
        or None for both)."""
        return await self._store.list_tasks(
            states=states, conversation_id=conversation_id, limit=limit, kind=kind
        )

    async def schedules(self) -> list[ScheduleView]:
        """Every schedule not removed or finished, oldest first."""
        if self._schedules is None:
            return []
        views = []
        for schedule in await self._schedules.listed():
            active = await self._store.active_conversation(
                schedule.channel, schedule.conversation_key
            )
            paused = schedule.state == PAUSED
            views.append(
                ScheduleView(
                    id=schedule.id,
                    channel=schedule.channel,
                    conversation_key=schedule.conversation_key,
                    conversation_id=active.id if active is not None else None,
                    rule=rule_of(schedule).describe(),
                    timezone=schedule.timezone,
                    next_run=None if paused else schedule.next_due,
                    paused=paused,
                    prompt=schedule.prompt,
                    creator_id=schedule.creator_id,
                )
            )
        return views

    async def pending_approvals(self) -> list[ApprovalRecord]:
        return await self._store.pending_approvals()

    async def pending_decisions(self) -> list[PendingDecision]:
        """Every decision a person is waiting on, of every kind (``core/decisions.py``),
        oldest first."""
        actions = self._service.action_approvals if self._service is not None else None
        proposals = self._schedules.proposals if self._schedules is not None else None
        return await pending_decisions(
            self._store, actions.records if actions is not None else None, proposals
        )

    async def approval(self, code: str) -> ApprovalRecord | None:
        """The approval ``code``, pending or decided; None when there is none."""
        return await self._store.approvals.get(code)

    async def task_counts(
        self, kind: TaskKind = TaskKind.AGENT
    ) -> dict[tuple[TaskState, CompletionReason | None], int]:
        """Agent tasks (or commands) per state and completion reason (the metrics' gauges)."""
        return await self._store.count_tasks(kind)

    def channels(self) -> list[ChannelView]:
        return self._live.channels()

    async def containers(self) -> list[SandboxContainer]:
        return await self._live.containers()

    async def conversation_containers(self, conversation_id: str) -> list[ContainerView]:
        """The conversation's containers (normally one): running / idle / stopped, when it
        was made, and what memory it uses now (when the sandbox can say). Raises what the
        sandbox raises when it cannot list them."""
        mine = [c for c in await self._live.containers() if c.context_id == conversation_id]
        if not mine:
            return []
        busy = bool(
            await self._store.list_tasks(
                states=[TaskState.EXECUTING],
                conversation_id=conversation_id,
                limit=1,
                kind=TaskKind.AGENT,
            )
        )
        views = []
        for container in mine:
            up = container.state == "running"
            memory = None
            if up and isinstance(self._live, MeasuresLiveContainers):
                memory = await self._live.container_memory(container.name)
            status = ("running" if busy else "idle") if up else "stopped"
            views.append(
                ContainerView(container.name, status, container.state, container.created_at, memory)
            )
        return views

    async def network_log(self, conversation_id: str) -> NetworkLog:
        """The requests the conversation's sandbox allowed and blocked, newest last
        (``core/conversations/network_log.py``: read by the sandbox, bounded)."""
        if self._context_files is None:
            return NetworkLog((), "The network log is read only where the conversations are.")
        if not (conversation_id.isascii() and conversation_id.isalnum()):  # ids are hex
            return NetworkLog((), "No such conversation.")
        return await read_network_log(self._context_files(conversation_id))

    async def task_timeline(self, task_id: str) -> TaskTimeline:
        """Raises KeyError for an unknown task."""
        task = await self._store.get_task(task_id)
        entries = await self._with_action_approvals(task_id, state_entries(task))
        lines, note = await self._agent_lines(task)
        agent = agent_entries(lines, self._parse_line) if self._parse_line else []
        # The agent's steps sit between "started" and what came after it.
        split = next(
            (n + 1 for n, e in enumerate(entries) if e.text.startswith("agent started")), 1
        )
        steps = with_durations(entries[:split] + agent + entries[split:])
        return TaskTimeline(task, tuple(steps), note)

    async def task_trace(self, task_id: str, now: float) -> Trace:
        """The task as a waterfall (``core/conversations/trace.py``): the timeline's
        sources, read once more. Raises KeyError for an unknown task."""
        task = await self._store.get_task(task_id)
        lines, note = await self._agent_lines(task)
        events = timed_events(lines, self._parse_line) if self._parse_line else []
        approvals = self._service.action_approvals if self._service is not None else None
        asked = await approvals.records.of_task(task_id) if approvals is not None else []
        network = await self.network_log(task.conversation_id) if task.conversation_id else None
        requests = network.requests if network is not None else ()
        ready = ready_at(lines)
        return build_trace(task, events, asked, requests, now=now, note=note, ready=ready)

    async def _agent_lines(self, task: TaskRecord) -> tuple[list[str], str]:
        """The event log's lines of ``task``'s runs, and a note when they are missing."""
        if (
            task.conversation_id is None
            or task.kind is TaskKind.COMMAND  # the agent never saw it
            or self._conversation_root is None
            or self._parse_line is None
        ):
            return [], ""
        root = self._conversation_root(task.conversation_id)
        return await task_log_lines(self._store, task, root)

    async def _with_action_approvals(
        self, task_id: str, entries: list[TimelineEntry]
    ) -> list[TimelineEntry]:
        """The task's action approvals (decision 0087), before its last state entry."""
        approvals = self._service.action_approvals if self._service is not None else None
        if approvals is None:
            return entries
        asked = await action_entries(approvals.records, task_id)
        return entries[:-1] + asked + entries[-1:]

    async def overview(self) -> Overview:
        agent = TaskKind.AGENT
        running = await self._store.list_tasks(states=[TaskState.EXECUTING], limit=1000, kind=agent)
        waiting = await self._store.list_tasks(states=WAITING_STATES, limit=1000, kind=agent)
        # A reply the channel would not take is the operator's concern, a command's too.
        undelivered = await self._store.list_tasks(states=[TaskState.UNDELIVERED], limit=1000)
        done = [TaskState.COMPLETED]
        containers: list[SandboxContainer] = []
        error = ""
        try:
            containers = await self._live.containers()
        except Exception as exc:  # the sandbox's trouble must not hide the rest
            log.warning("listing containers failed: %s", exc)
            error = f"{type(exc).__name__}: {exc}"
        return Overview(
            channels=tuple(self._live.channels()),
            containers=tuple(containers),
            containers_error=error,
            running=tuple(running),
            waiting=tuple(waiting),
            undelivered=tuple(undelivered),
            pending_approvals=tuple(await self._store.pending_approvals()),
            finished=tuple(
                reversed(await self._store.list_tasks(states=done, limit=RECENT, kind=agent))
            ),
            commands=tuple(
                reversed(
                    await self._store.list_tasks(states=done, limit=RECENT, kind=TaskKind.COMMAND)
                )
            ),
            schedules=tuple(await self.schedules()),
        )

    # -- the dashboard's front page and lists (core/status/overview.py, state/task_lists.py) --

    async def front_page(self, now: float) -> front.FrontPage:
        return await front.front_page(self._store, self._live, await self.pending_decisions(), now)

    async def task_page(
        self, which: lists.TaskFilter, *, after: lists.Cursor | None = None, limit: int = 50
    ) -> lists.TaskPage:
        return await self._store.task_page(which, after=after, limit=limit)

    async def conversation_page(
        self, which: lists.ConversationFilter, *, offset: int = 0, limit: int = 50
    ) -> tuple[list[lists.ConversationSummary], bool]:
        return await self._store.conversation_page(which, offset=offset, limit=limit)

    # -- controls (in the daemon only) -------------------------------------------------------

    def _live_service(self, what: str) -> GatewayService:
        if self._service is None:
            raise NotInThisProcess(f"{what} needs the running daemon")
        return self._service

    async def stop_task(self, task_id: str) -> StopOutcome:
        """Stop a running task as /stop in its conversation does (the agent's run is
        cancelled; the conversation is told "Stopped."). A task that is not running is left
        alone. Raises KeyError for an unknown task."""
        service = self._live_service("stopping a task")
        task = await self._store.get_task(task_id)
        if task.state is not TaskState.EXECUTING or task.conversation_id is None:
            return StopOutcome(False, f"Task {task_id} is {task.state.value}, not running.")
        running = service.scheduler.running_tasks.get(task.conversation_id)
        if running is None or running.task_id != task_id:
            return StopOutcome(False, f"Task {task_id} is not running in this daemon.")
        running.request_stop()
        return StopOutcome(True, f"Stopping task {task_id}…")

    def decides_somewhere(self, identity: str) -> bool:
        """Is ``identity`` an owner or admin on some channel (``gateway-bot approve --as``):
        only they are told whether a code exists."""
        return self._live_service("deciding an approval").gatekeeper.decides_somewhere(identity)

    def decides_here(self, channel: str) -> bool:
        """Can this process decide an approval of ``channel`` (``GatewayService.decides_here``):
        the control socket sends the shell elsewhere when not."""
        return self._live_service("deciding an approval").decides_here(channel)

    async def decide(
        self, decision: PendingDecision, choice: str, *, decider_id: str, answer: str = ""
    ) -> str | None:
        """Decide a pending decision of any kind as ``decider_id`` on its channel, as that
        kind's card button would (``core/decisions.decide``); None when that identity may
        not. Raises ValueError for a choice the kind does not offer."""
        service = self._live_service("deciding")
        return await decide(
            decision,
            choice,
            decider_id=decider_id,
            gate=service.gatekeeper,
            actions=service.action_approvals,
            proposals=service.schedule_proposals,
            answer=answer,
        )

    async def decide_approval(
        self, code: str, choice: str, *, channel: str, decider_id: str, decider_name: str = ""
    ) -> str | None:
        """``choice`` "allow" or "deny", decided by ``decider_id`` on ``channel`` exactly as
        a card's button press would be. Returns the decider's line; None when that identity
        may not decide (not an owner or admin of ``channel``)."""
        if choice not in ("allow", "deny"):
            raise ValueError(f"an approval is decided with allow or deny, not {choice!r}")
        service = self._live_service("deciding an approval")
        return await service.gatekeeper.decide(
            channel, decider_id, decider_name or decider_id, code, choice
        )
