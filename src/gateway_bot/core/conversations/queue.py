"""The per-conversation scheduler: each conversation's queue, its running task, ``/stop``
and its progress display (the warm agent session is the runner's: ``agents/claude/warm.py``).

Semantics, aiojobs-style: ``queue`` (a routed message) and ``enqueue`` (a recovered one)
spawn a conversation's drainer when it has none; at most one task runs per conversation, in
arrival order; at most ``max_concurrent`` run at once overall (a global limit, waited for
outside any lock); a conversation holds at most ``max_pending`` waiting tasks, and refuses
the next with a message; closing is the service's ``Jobs.close``, which cancels every
drainer (a running task then stays EXECUTING and the next start runs it again).

Queue first, then acknowledge: the acknowledgement is a retried job of its own that the
task waits for (so "Working on it" comes before the progress display) but whose failure
never keeps the task from running. A channel without a ``ProgressDisplay`` gets no progress;
one that ``Acknowledges`` (mail) gets the acknowledgement alone, others see the reply only.

Why a task leaves its queue whatever happens to it: a drainer that kept a failed task at
the head re-ran it for the next message (EXECUTING -> EXECUTING, refused), and the
conversation answered "Queued…" for ever. A reply the channel would not take parks its task
as UNDELIVERED (``ReplyDelivery``) instead of raising; anything else that fails is logged
and left where the store has it, for the next start.

``GatewayService`` keeps intake and routing; this module only runs what was routed here.
What people hear before the reply goes out through ``core/queue_notices``; a task whose
sandbox host is unreachable waits in ``core/host_waits``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

import structlog

from gateway_bot.agents.base import ToolUseEvent
from gateway_bot.core.channel import ChannelAdapter, attachment_downloads
from gateway_bot.core.conversations.delivery import ReplyDelivery
from gateway_bot.core.conversations.executor import TaskResult
from gateway_bot.core.conversations.host_waits import HostWaits
from gateway_bot.core.conversations.lanes import (
    STOPPED_TEXT,
    ConversationClaims,
    ConversationLane,
    Executes,
    RunningTask,
    fenced_record,
)
from gateway_bot.core.conversations.queue_notices import QueueNotices
from gateway_bot.core.conversations.task_gates import Acknowledged, Slot, reporter_for
from gateway_bot.core.fault_points import reached
from gateway_bot.core.intake.flush_holds import DiskHolds
from gateway_bot.core.jobs import Jobs
from gateway_bot.core.retries import DEFAULT_POLICY, RetryPolicy
from gateway_bot.core.schedules.request_file import RequestFile
from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from gateway_bot.domain.messages import InboundMessage, Reply
from gateway_bot.domain.records import TaskRecord
from gateway_bot.sandbox.base import HostUnreachable, SandboxUnavailable
from gateway_bot.state.store import Store

log = logging.getLogger(__name__)

OnScheduleRequest = Callable[[str, InboundMessage, RequestFile], Awaitable[None]]


class Scheduler:
    def __init__(
        self,
        store: Store,
        adapters: Mapping[str, ChannelAdapter],
        executor: Executes,
        replies: ReplyDelivery,
        jobs: Jobs,
        *,
        max_concurrent: int,
        max_pending: int,
        policy: RetryPolicy = DEFAULT_POLICY,
        conversation_link: Callable[[str], str | None] | None = None,
    ) -> None:
        """``conversation_link``: a conversation id's page on the dashboard (or None), which
        the acknowledgement then ends with."""
        self._store = store
        self._adapters = adapters
        self._executor = executor
        self._replies = replies
        self._jobs = jobs
        self._slots = asyncio.Semaphore(max_concurrent)
        self._max_pending = max_pending
        self._lanes: dict[str, ConversationLane] = {}
        self._running: dict[str, RunningTask] = {}
        self._notices = QueueNotices(
            adapters, jobs, policy, conversation_link, store.note_acknowledged
        )
        self._host_waits = HostWaits(store, replies, self._notices, self._running)
        self._disk = DiskHolds(store.flush)
        """Per task taken in before its message was on disk: the flush its notices wait
        for (``hold_notices``); gone once the flush is done."""
        self.claims: ConversationClaims | None = None
        """Set for a replica of several (``core/replicas/duties.py``); None: a single daemon."""
        self.on_schedule_request: OnScheduleRequest | None = None
        """Given the agent's ``outbox/schedule.json`` after the reply (the service sets it
        when schedules are on: ``core/schedules/proposals.py``)."""

    @property
    def notices(self) -> QueueNotices:
        """Best-effort sends in jobs of their own (routing tells a refused decider why)."""
        return self._notices

    @property
    def running_tasks(self) -> Mapping[str, RunningTask]:
        """Conversation id -> its running task (a live view, read by the chat commands)."""
        return self._running

    def _lane(self, conversation_id: str) -> ConversationLane:
        lane = self._lanes.get(conversation_id)
        if lane is None:
            lane = self._lanes[conversation_id] = ConversationLane(conversation_id)
        return lane

    def depth(self, conversation_id: str) -> int:
        """Tasks of the conversation in the scheduler, the one in progress included."""
        lane = self._lanes.get(conversation_id)
        return len(lane.queue) if lane else 0

    def ahead(self, conversation_id: str) -> int:
        """Tasks a new message of the conversation waits for: ``depth`` without a task whose
        agent is done (its reply on its way)."""
        lane = self._lanes.get(conversation_id)
        if lane is None or not lane.queue:
            return 0
        return len(lane.queue) - (1 if lane.queue[0] == lane.answering else 0)

    def is_full(self, conversation_id: str) -> bool:
        """True when another message would exceed the conversation's waiting limit."""
        depth = self.depth(conversation_id)
        return depth > 0 and depth - 1 >= self._max_pending

    def hold_notices(self, task_id: str, on_disk: asyncio.Future[None]) -> None:
        """The task's message is committed but not yet on disk (``on_disk`` says when it
        is): ``queue`` waits for that before the task joins its lane, so no person hears
        of a message a power cut could still take (no acknowledgement, refusal or run), and
        a task killed before it is on disk is at most being routed (decision 0098)."""
        self._disk.hold(task_id, on_disk)

    def preparing(self, task_id: str, message: InboundMessage) -> asyncio.Future[None] | None:
        """The acknowledgement's preparation (the channel's record of the post to come),
        started now, for routing to run beside its own reads; None once the message is on
        disk (the post then writes its record itself). It never fails (logged)."""
        if not self._disk.held(task_id):
            return None
        return asyncio.ensure_future(self._notices.prepare_acknowledgement(task_id, message))

    async def queue(
        self,
        task: TaskRecord,
        message: InboundMessage,
        conversation_id: str,
        prepared: asyncio.Future[None] | None = None,
    ) -> None:
        """Take a routed message: PENDING and queued, then acknowledged; or refused when the
        conversation already has ``max_pending`` waiting. The acknowledgement (or refusal) is a
        job of its own, retried, and never decides whether the task runs. ``prepared``: the
        acknowledgement's preparation, begun during routing (``preparing``)."""
        if prepared is not None:  # (awaited even once on disk: the post must find it done)
            await prepared
        if self._disk.held(task.id):
            if prepared is None and not self.is_full(conversation_id):
                await self._notices.prepare_acknowledgement(task.id, message)
            # (its lane, its notices and a kill's recovery start from here)
            await self._disk.on_disk(task.id)
        ahead = self.ahead(conversation_id)
        full = self.is_full(conversation_id)
        # The acknowledgement starts before PENDING is written, not after (issue 33): the
        # message is on disk already, PENDING is a relaxed commit that recovery rebuilds,
        # and a routing tried again acknowledges again through the channel's own exactly-
        # once send (Slack's post records, Matrix's transaction id by task).
        acknowledged = (
            None if full else self._notices.acknowledge(task.id, message, conversation_id, ahead)
        )
        if acknowledged is not None:
            # One turn of the loop: the acknowledgement's job runs up to its first trip to
            # the store (a channel's record of the post to come), which then goes to the
            # store's thread ahead of PENDING, not behind it.
            await asyncio.sleep(0)
        await self._store.transition(
            task.id, TaskState.PENDING, conversation_id=conversation_id, parsed=message, known=task
        )
        reached("routed")
        if full:
            text = (
                f"This conversation already has {ahead - 1} messages waiting; this one was "
                "not queued. Send it again when the agent has caught up, or /stop."
            )
            await self._store.transition(
                task.id, TaskState.COMPLETED, reason=CompletionReason.REJECTED, error=text
            )
            self._notices.refuse(task.id, message, text)
            return
        self.enqueue(conversation_id, task.id, after=acknowledged)

    def enqueue(
        self, conversation_id: str, task_id: str, *, after: asyncio.Task[None] | None = None
    ) -> None:
        """Queue a PENDING task; ``after`` (its acknowledgement) is awaited before what it
        shows the person (``task_gates.Acknowledged``). A replica of several queues only
        conversations it claims."""
        if self.claims is not None and not self.claims.holds(conversation_id):
            self.claims.wanted(conversation_id)
            return
        lane = self._lane(conversation_id)
        if self.claims is not None and task_id in lane.queue:
            return  # found by the replica's poll while its intake was queueing it
        lane.queue.append(task_id)
        if after is not None:
            lane.before[task_id] = after
        if lane.drainer is None:
            lane.drainer = self._jobs.spawn(self._drain(lane), name=f"drain-{conversation_id}")

    async def set_waiting(self, task_id: str, what: str | None) -> None:
        """The task's run waits for a person (``what``: the request's summary) or no longer
        (None): a progress step says so, and /status."""
        for running in self._running.values():
            if running.task_id != task_id:
                continue
            if what is not None and running.acknowledged is not None:
                await running.acknowledged()  # (the card goes after "Working on it…")
            running.waiting_for = what
            if what is not None and running.progress is not None:
                await running.progress.on_event(
                    ToolUseEvent("approval", f"waiting for approval: {what}")
                )

    def in_lane(self, conversation_id: str, task_id: str) -> bool:
        """The task is queued (or running) here."""
        lane = self._lanes.get(conversation_id)
        return lane is not None and task_id in lane.queue

    def abandon(self, conversation_id: str) -> None:
        """This replica lost the conversation's claim (it was declared dead): its queued
        tasks leave the lane (they are pending in the store; the next holder queues them in
        order) and its run stops, unanswered (the reply's record is fenced), so no task of
        it runs here beside the new holder's."""
        lane = self._lanes.get(conversation_id)
        if lane is None:
            return
        while len(lane.queue) > 1:
            lane.before.pop(lane.queue.pop(), None)
        running = lane.running
        if running is None:
            return
        if running.host_down is not None:
            running.job.cancel()  # the pause only: the lane then finds the claim gone
        else:
            running.request_stop()

    async def settled(self, conversation_id: str, timeout_s: float) -> bool:
        """Wait, at most ``timeout_s``, until nothing of the conversation is in progress
        here; whether that came."""
        lane = self._lanes.get(conversation_id)
        if lane is None or lane.drainer is None:
            return True
        done, _ = await asyncio.wait([lane.drainer], timeout=timeout_s)
        return bool(done)

    def stop(self, conversation_id: str) -> RunningTask | None:
        """/stop: cancel the conversation's running task; None when nothing runs."""
        running = self._running.get(conversation_id)
        if running is not None:
            running.request_stop()
        return running

    async def _drain(self, lane: ConversationLane) -> None:
        """Run the lane's queue in order. No await between the emptiness check and leaving,
        so a task enqueued meanwhile always finds a drainer."""
        queue = lane.queue
        try:
            while queue:
                task_id = queue[0]
                waits = False
                try:
                    acknowledged = Acknowledged(lane.before.pop(task_id, None))
                    slot = Slot(self._slots)
                    try:
                        await slot.take()
                        waits = await self._execute(lane, task_id, slot.give_back, acknowledged)
                    finally:
                        slot.give_back()
                    if waits and await self._host_waits.stopped_during_pause(
                        lane, task_id, self.claims
                    ):
                        waits = False  # answered "Stopped.": it leaves the lane
                except Exception:
                    log.exception(
                        "task %s failed outside the agent; the next start retries", task_id
                    )
                finally:
                    if not waits:
                        queue.popleft()
                        lane.answering = None
                        self._host_waits.forget(task_id)
        finally:
            lane.drainer = None
            if self.claims is not None and not queue:
                self.claims.drained(lane.conversation_id)

    async def _execute(
        self,
        lane: ConversationLane,
        task_id: str,
        free_slot: Callable[[], None],
        acknowledged: Acknowledged,
    ) -> bool:
        """Runs the task; True when it waits for its sandbox host (back to PENDING).
        ``free_slot``: called once the agent is done, before the reply is stored and sent;
        ``acknowledged``: the acknowledgement on its way, which everything the task shows
        the person waits for (not its run: issue 33, a Matrix send is 15-20 ms)."""
        # Every line logged while the task runs (here, in the executor's job, in the agent
        # runner) carries the ids; the binding ends with this call.
        with structlog.contextvars.bound_contextvars(
            task_id=task_id, conversation_id=lane.conversation_id
        ):
            return await self._run_task(lane, task_id, free_slot, acknowledged)

    async def _run_task(
        self,
        lane: ConversationLane,
        task_id: str,
        free_slot: Callable[[], None],
        acknowledged: Acknowledged,
    ) -> bool:
        if self.claims is not None and not self.claims.holds(lane.conversation_id):
            log.warning("task %s: its conversation's claim was lost: not run here", task_id)
            return False
        claim = self.claims.claim_token(lane.conversation_id) if self.claims else None
        task = await self._store.get_task(task_id)
        if task.state is not TaskState.PENDING:
            log.warning("task %s is %s, not pending: not run", task_id, task.state.value)
            return False
        task = await self._store.transition(task_id, TaskState.EXECUTING, known=task)
        reached("executing")
        message = task.parsed
        assert message is not None
        log.info("task %s running (%s, from %s)", task_id, task.channel, message.sender_id)
        adapter = self._adapters[task.channel]
        conversation = await self._store.get_conversation(lane.conversation_id)
        reporter = reporter_for(task_id, adapter, message, acknowledged)
        downloads = attachment_downloads(adapter)
        job = asyncio.create_task(
            self._executor.execute(task_id, conversation, message, downloads, reporter.on_event)
        )
        running = RunningTask(task_id, message.body, job)
        running.progress = reporter
        running.acknowledged = acknowledged.out
        lane.running = self._running[lane.conversation_id] = running
        try:
            result = await asyncio.shield(job)
        except asyncio.CancelledError:
            if not (running.stop_requested and job.cancelled()):
                job.cancel()
                raise  # the daemon is shutting down: the task stays EXECUTING, re-run later
            result = TaskResult(Reply(text=STOPPED_TEXT, stopped=True), CompletionReason.CANCELLED)
        except HostUnreachable as exc:
            await acknowledged.out()
            await self._host_waits.wait(task_id, adapter, message, exc)
            return True  # (``finally`` below closes the reporter and clears the lane)
        except SandboxUnavailable as exc:
            log.warning("task %s: the sandbox could not run it: %s", task_id, exc)
            result = TaskResult(
                Reply(text=f"The sandbox could not run this task: {exc}", is_error=True),
                CompletionReason.INTERNAL_ERROR,
            )
        except Exception as exc:
            log.exception("task %s failed", task_id)
            result = TaskResult(
                Reply(text=f"Internal error: {exc}", is_error=True), CompletionReason.INTERNAL_ERROR
            )
        finally:
            await reporter.close()
            lane.running = None
            self._running.pop(lane.conversation_id, None)
        # The agent is done: its slot goes to the next conversation's task while this one's
        # reply is stored and sent (issue 33: at concurrency 1 the store's commits and the
        # channel's send were run one task after another, with no agent running).
        free_slot()
        lane.answering = task_id
        await acknowledged.out()
        record = fenced_record(self.claims, lane.conversation_id, task_id, result.reply, claim)
        await self._replies.store_and_send(
            task_id, message, result.reply, result.reason, reporter.finished(result.reply), record
        )
        log.info("task %s done: %s", task_id, result.reason.value)
        if result.schedule_request is not None and self.on_schedule_request is not None:
            try:
                await self.on_schedule_request(task_id, message, result.schedule_request)
            except Exception:
                log.exception("task %s: the agent's schedule request failed", task_id)
        return False
