"""The gateway service: accept, authenticate, route; recover at start.

A message's path: a channel listener calls ``submit`` -> the message is committed to the
store (only then may the channel acknowledge it at its source) -> authenticated and parsed
by its channel -> commands are answered at once, other messages join their conversation
in the scheduler (``core/conversations/queue.py``: one task at a time per conversation, at
most N at once overall) -> the reply is stored, then sent, then the task completes
(``core/conversations/delivery.py``). At start-up the recovery sweep picks up every task a
crash left behind, so each accepted message is answered exactly once.

Intake (the store commit, then authentication and routing in arrival order per channel) is
``core/intake/intake.py``. A message whose channel stays unreachable is taken up again by the
periodic sweep here, which also sends parked replies again and posts approval cards that
never went out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Protocol

from gateway_bot.config.access import AccessSettings
from gateway_bot.config.action_rules import ActionApprovalSettings
from gateway_bot.core.actions.approvals import ActionApprovals
from gateway_bot.core.admission.gate import Gatekeeper
from gateway_bot.core.channel import ChannelAdapter, SendsWhereItListens
from gateway_bot.core.commands.effects import ChatCommands
from gateway_bot.core.commands.mail import ConversationMailer
from gateway_bot.core.commands.schedule import ScheduleCommands
from gateway_bot.core.conversations.delivery import ReplyDelivery
from gateway_bot.core.conversations.lanes import Executes
from gateway_bot.core.conversations.queue import Scheduler
from gateway_bot.core.intake.intake import AfterLock, Intake
from gateway_bot.core.intake.lone_files import LoneFiles
from gateway_bot.core.intake.recovery import Recovery
from gateway_bot.core.intake.routing import Router
from gateway_bot.core.jobs import Jobs
from gateway_bot.core.retries import DEFAULT_POLICY, RetryPolicy
from gateway_bot.core.schedules.proposals import ScheduleProposals
from gateway_bot.core.schedules.runner import Clock, ScheduleRunner, Sleep
from gateway_bot.core.workspaces.reports import WorkspaceReports
from gateway_bot.domain.lifecycle import TaskState
from gateway_bot.domain.messages import RawMessage
from gateway_bot.domain.records import ConversationRecord, TaskRecord
from gateway_bot.state.action_approvals_store import SqlActionApprovals
from gateway_bot.state.schedules_store import SqlSchedules
from gateway_bot.state.store import Store

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 60.0
"""How often parked work is taken up again: approval cards checked for expiry or never
posted, replies a channel would not take, messages whose channel could not be reached."""


class ReplicaDuties(Protocol):
    """Several replicas on one database (``core/replicas/duties.py``): what this one leads now."""

    def leases_listener(self, channel: str) -> bool:
        """The channel's listener runs under a lease (started by the lease's holder, not by
        ``start``)."""
        ...

    def leads(self, duty: str) -> bool:
        """This replica holds the lease named ``duty`` now: a channel's name (its intake
        and parked messages) or "sweep" (approval cards, parked replies). A channel whose
        listener is not leased (the console) is always led here."""
        ...


class GatewayService:
    def __init__(
        self,
        store: Store,
        adapters: Mapping[str, ChannelAdapter],
        executor: Executes,
        *,
        access: AccessSettings,
        timezone: str,
        max_concurrent_tasks: int,
        max_pending_per_conversation: int,
        retry_policy: RetryPolicy = DEFAULT_POLICY,
        sweep_interval_s: float = SWEEP_INTERVAL_S,
        workspace_reports: WorkspaceReports | None = None,
        schedules: SqlSchedules | None = None,
        schedule_clock: Clock = time.time,
        schedule_sleep: Sleep = asyncio.sleep,
        conversation_link: Callable[[str], str | None] | None = None,
        agent_names: Sequence[str] = (),
        action_records: SqlActionApprovals | None = None,
        action_settings: ActionApprovalSettings | None = None,
        files_wait_s: float = 0.0,
    ) -> None:
        """``schedules``: the store of /schedule (decision 0068); without it the schedule
        commands answer that they are not available. Clock and sleep: for tests.
        ``action_records`` and ``action_settings``: action approvals (decision 0087,
        ``core/actions/approvals.py``); without them nothing is asked. ``files_wait_s``: how
        long a message of files alone waits for its sender's words (``core/intake/lone_files``;
        0, the default here, runs it at once)."""
        self._store = store
        self._adapters = dict(adapters)
        self._access = access
        self._sweep_interval_s = sweep_interval_s
        self._jobs = Jobs()
        self._gate = Gatekeeper(
            store, access, self._adapters, self._release_held, timezone, retry_policy=retry_policy
        )
        self._sweeper: asyncio.Task[None] | None = None
        self._mail = ConversationMailer(store, self._adapters, access, retry_policy)
        self._replies = ReplyDelivery(
            store, self._adapters, self._jobs, retry_policy, self._mail.copy_to_chat
        )
        self._scheduler = Scheduler(
            store,
            self._adapters,
            executor,
            self._replies,
            self._jobs,
            max_concurrent=max_concurrent_tasks,
            max_pending=max_pending_per_conversation,
            policy=retry_policy,
            conversation_link=conversation_link,
        )
        self._intake = Intake(
            store, self._adapters, self._scheduler, self._jobs, retry_policy, self._route
        )
        self._recovery = Recovery(store, self._intake, self._scheduler, self._replies, self._jobs)
        self._lone_files = LoneFiles(files_wait_s, self._intake.take_in)
        self.schedules: ScheduleRunner | None = None
        schedule_commands = None
        proposals: ScheduleProposals | None = None
        if schedules is not None:
            self.schedules = ScheduleRunner(
                schedules,
                self._adapters,
                self._intake.submit_scheduled,
                access.schedules,
                store,
                clock=schedule_clock,
                sleep=schedule_sleep,
            )
            schedule_commands = ScheduleCommands(self.schedules, access, timezone)
            proposals = ScheduleProposals(
                schedules.proposals, schedule_commands, access, self._adapters
            )
            self._scheduler.on_schedule_request = proposals.propose
        self._commands = ChatCommands(
            store,
            self._gate,
            self._scheduler.running_tasks,
            self.start_new_conversation,
            workspace_reports,
            schedule_commands,
            proposals,
            self._mail,
            agent_names,
        )
        self._proposals = proposals
        self.action_approvals: ActionApprovals | None = None
        if action_records is not None:
            settings = action_settings or ActionApprovalSettings()
            self.action_approvals = ActionApprovals(
                action_records,
                store,
                self._adapters,
                access,
                timeout_s=settings.timeout_s,
                deciders=settings.deciders,
                timezone=timezone,
            )
            self.action_approvals.on_waiting = self._scheduler.set_waiting
            self._commands.action_approvals = self.action_approvals
        self.replicas: ReplicaDuties | None = None
        """Set (before ``start``) for a replica of several; None: a single daemon."""
        self._router = Router(
            store,
            self._adapters,
            access,
            self._gate,
            self._mail,
            self._replies,
            self._commands,
            self._scheduler,
            self.schedules,
            proposals,
            self.action_approvals,
            self._lone_files,
        )

    @property
    def scheduler(self) -> Scheduler:
        """For the application API (``core/application.py``): stop a running task."""
        return self._scheduler

    @property
    def schedule_proposals(self) -> ScheduleProposals | None:
        """For the application API: decide a schedule the agent proposed."""
        return self._proposals

    @property
    def gatekeeper(self) -> Gatekeeper:
        """For the application API: decide an approval as a card's button does."""
        return self._gate

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Recover what a previous run left, then start every channel's listener. A replica
        of several recovers nothing here: each conversation is recovered by the replica that
        claims it, each channel's intake by its listener's holder, the rest by the sweep's
        (and another replica's pending action cards are its own, not abandoned ones)."""
        if self.action_approvals is not None:
            await self.action_approvals.records.open()
            if self.replicas is None:
                await self.action_approvals.recover()
        if self.replicas is None:
            await self.recover()
            await self._gate.expire()
            await self._gate.resend_unsent_cards()
        self._sweeper = asyncio.create_task(self._sweep_periodically())
        self._intake.accepting = True
        if self.schedules is not None:
            await self.schedules.start()
        for adapter in self._adapters.values():
            if self.replicas is None or not self.replicas.leases_listener(adapter.name):
                await adapter.listener.start(self.submit)

    async def _sweep_periodically(self) -> None:
        while True:
            await asyncio.sleep(self._sweep_interval_s)
            try:
                await self.sweep()
            except Exception:
                log.exception("the periodic sweep failed")

    async def sweep(self) -> None:
        """Take up what is parked: expired or unsent approval cards, replies a channel would
        not take, messages whose channel could not be reached to parse them."""
        if self.replicas is None or self.replicas.leads("sweep"):
            await self._gate.expire()
            await self._gate.resend_unsent_cards()
            await self._replies.redeliver()
        for task in await self._store.tasks_in_states([TaskState.QUEUED]):
            if self.replicas is None or self.replicas.leads(task.channel):
                self._intake.take_in(task.id)

    def decides_here(self, channel: str) -> bool:
        """May this process decide ``channel``'s approvals (release the held messages, edit
        the card, join the room)? Always, but for a channel that sends only where its
        listener runs (Matrix) under replicas: only the listener's holder can edit its card
        or join its room, so a decision is left to that replica."""
        if self.replicas is None or self.replicas.leads(channel):
            return True
        return not isinstance(self._adapters.get(channel), SendsWhereItListens)

    async def take_in_channel(self, channel: str) -> None:
        """A replica that just took a channel's listener lease takes up the messages the
        previous holder stored but had not routed (queued, or held mid-authentication)."""
        await self._intake.take_in_channel(channel)

    async def recover_conversation(self, conversation_id: str) -> None:
        """A replica that just claimed a conversation finishes what the previous holder
        left, oldest first: a stored reply is delivered, an interrupted run goes back to
        pending. The caller then queues the pending tasks (``core/replicas/duties.py``)."""
        await self._recovery.conversation(conversation_id)

    def spawn(self, job: Coroutine[Any, Any, None], name: str) -> None:
        """Background work of the replicas' coordinator, closed with the service's jobs."""
        if self._jobs.closed:
            job.close()
            return
        self._jobs.spawn(job, name=name)

    async def stop_listening(self) -> None:
        self._intake.accepting = False
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self.schedules is not None:
            await self.schedules.stop()
        for adapter in self._adapters.values():
            if self.replicas is None or not self.replicas.leases_listener(adapter.name):
                await adapter.listener.stop()

    async def wait_idle(self, timeout_s: float | None) -> bool:
        """Wait until no task is in flight; False if the timeout passed first."""
        return await self._jobs.wait_idle(timeout_s)

    async def shutdown(self, timeout_s: float) -> None:
        """Stop listening, let running tasks finish for up to ``timeout_s``, then abandon
        the rest where they stand: the next start's recovery re-runs them."""
        await self.stop_listening()
        self._lone_files.close()  # waiting files are stored: the next start waits again
        if self.action_approvals is not None:
            self.action_approvals.shutting_down()
        if not await self.wait_idle(timeout_s):
            log.warning(
                "shutdown: tasks still running after %.0f s; they will be re-run at the next start",
                timeout_s,
            )
        await self._jobs.close()
        await self._gate.close()

    # -- intake ------------------------------------------------------------------------

    async def submit(self, raw: RawMessage) -> bool:
        """Durably accept a message (``Intake.submit``): a channel listener's callback.
        Returns True once it is safe to ack at the source."""
        return await self._intake.submit(raw)

    async def recover(self) -> None:
        """The start-up sweep (``core/intake/recovery.py``): every task not completed is finished
        or re-run."""
        await self._recovery.at_start()

    async def _route(self, task_id: str, known: TaskRecord | None = None) -> AfterLock | None:
        """Intake's routing step (the router is made last: it needs the optional parts)."""
        return await self._router.route(task_id, known)

    async def _release_held(self, task_id: str) -> None:
        """An owner allowed the sender: the held message joins its conversation."""
        await self._router.release_held(task_id)

    async def start_new_conversation(self, channel: str, key: str) -> ConversationRecord:
        """Retire the active conversation of (channel, key); the next message starts afresh.
        The model chosen with /model carries over."""
        previous = await self._store.active_conversation(channel, key)
        model = previous.next_model if previous else None
        agent = previous.next_agent if previous else None
        created = await self._store.create_conversation(channel, key, None)
        if model or agent:
            created = await self._store.update_conversation(
                created.id, next_model=model, next_agent=agent
            )
        return created
