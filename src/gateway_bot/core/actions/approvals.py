"""Action approvals (decision 0087): the agent (or the egress proxy on its behalf) asks before an
action the policy says to ask about, and a person answers with a card's button in the
conversation where the agent works.

``ActionApprovals.ask`` is the one entry point every layer uses (the tool-call hook, the
proxy's held requests, AskUserQuestion, the budget): it cards the conversation, waits for a
decision or ``timeout_s`` and returns an ``ActionDecision``. A request a person answered
"Always in this conversation" is remembered by its ``signature`` (the exact command, or for
the proxy "network POST host /path"), and an identical later request is allowed without a
card; another conversation still asks.

Who may answer: with ``deciders: conversation`` the person whose message the task answers,
the members an owner admitted to that room, and owners and admins; with ``owners`` owners
and admins only. Anyone else's press changes nothing, and is recorded
(``action_approval_refusals``) and logged.

Durable: every request is a row before its card goes out. A request still pending when the
daemon starts belongs to a run that no longer exists: ``recover`` closes it (the card says
so) and a late press on it is refused, so a decision never applies to a different request;
the recovered task runs again and asks anew.

Replicas (``ha``): the task waits on the replica that runs it, while a press reaches the
replica holding the channel's listener, which records the decision in the shared row.
``watch_shared`` makes a waiting ``ask`` re-read its row every ``poll_s`` (the future still
wakes it at once when the press lands on its own replica); a single daemon polls nothing.

The request and decision values, and the reading of a decided row, are in
core/actions/requests.py (re-exported here).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from gateway_bot.config.access import AccessSettings
from gateway_bot.config.action_rules import Deciders
from gateway_bot.core.actions.cards import as_text, closed_card, pending_card
from gateway_bot.core.actions.requests import (
    MAX_PENDING_PER_CONVERSATION,
    TOO_MANY_PENDING,
    ActionDecision,
    ActionRequest,
    AskAction,
    answer_of,
    decision_of,
)
from gateway_bot.core.admission.card_posting import post_card
from gateway_bot.core.channel import CardButtons, ChannelAdapter
from gateway_bot.domain.lifecycle import TaskState
from gateway_bot.domain.messages import InboundMessage
from gateway_bot.state.action_approvals_store import (
    ABANDONED,
    ALLOWED,
    CANCELLED,
    DENIED,
    EXPIRED,
    PENDING,
    ActionApprovalRecord,
    ConversationRule,
    SqlActionApprovals,
)
from gateway_bot.state.store import Store

log = logging.getLogger(__name__)

__all__ = ["ActionApprovals", "ActionDecision", "ActionRequest", "AskAction", "WaitingListener"]


WaitingListener = Callable[[str, str | None], Awaitable[None]]
"""Told (task id, the request's summary) when a task starts waiting for a person, and
(task id, None) when it stops."""


class ActionApprovals:
    def __init__(
        self,
        records: SqlActionApprovals,
        store: Store,
        adapters: Mapping[str, ChannelAdapter],
        access: AccessSettings,
        *,
        timeout_s: float = 600.0,
        deciders: Deciders = Deciders.CONVERSATION,
        timezone: str = "UTC",
    ) -> None:
        self._records = records
        self._store = store
        self._adapters = adapters
        self._access = access
        self._timeout_s = timeout_s
        self._deciders = deciders
        self._timezone = timezone
        self._waiting: dict[str, asyncio.Future[ActionDecision]] = {}
        self._pending: dict[str, int] = {}
        """Requests waiting for a decision, by conversation (its task runs here)."""
        self._lock = asyncio.Lock()
        """Held around a decision and the card edit it makes, so a timeout's "expired" and
        a press cannot both edit the card."""
        self.on_waiting: WaitingListener | None = None
        self._shutting_down = False
        self._poll_s: float | None = None
        """Set under replicas: how often a waiting request re-reads its row."""

    def watch_shared(self, poll_s: float) -> None:
        """One of several replicas: a decision may be recorded by another replica (the one
        whose listener heard the press), so a waiting request re-reads its row every
        ``poll_s`` as well as waiting for a press heard here."""
        self._poll_s = poll_s

    def shutting_down(self) -> None:
        """The daemon stops: a run cancelled from now on is re-run at the next start, so its
        pending request is abandoned (as after a crash), not cancelled by its task."""
        self._shutting_down = True

    @property
    def records(self) -> SqlActionApprovals:
        return self._records

    async def recover(self) -> None:
        """At start-up: close every request a previous run left pending (its run is gone;
        the task runs again and asks anew) and say so on its card."""
        for record in await self._records.pending():
            if await self._records.decide(record.code, ABANDONED, "restart"):
                log.info("closed action approval %s left pending by a restart", record.code)
                await self._close_card(record.code)

    async def abandon_in(self, conversation_id: str) -> None:
        """Under replicas, when this replica takes up a conversation: a request still
        pending there was asked by a run of the replica that had it (dead, or paused and
        fenced off), whose task runs again and asks anew. Close it as a restart would."""
        for record in await self._records.pending():
            if record.conversation_id != conversation_id or record.code in self._waiting:
                continue
            if await self._records.decide(record.code, ABANDONED, "take-over"):
                log.info("closed action approval %s left pending by another replica", record.code)
                await self._close_card(record.code)

    async def always_rules(self, conversation_id: str) -> list[ConversationRule]:
        return await self._records.rules(conversation_id)

    async def ask(self, request: ActionRequest) -> ActionDecision:
        """Card the conversation and wait for a person's decision (or the timeout). A
        request whose signature the conversation allowed always is allowed at once; one
        past ``MAX_PENDING_PER_CONVERSATION`` waiting is refused at once."""
        if request.kind != "question":
            for rule in await self._records.rules(request.conversation_id):
                if rule.signature == request.signature:
                    return ActionDecision(True, "always in this conversation", rule.added_by)
        conversation = request.conversation_id
        if self._pending.get(conversation, 0) >= MAX_PENDING_PER_CONVERSATION:
            log.warning("conversation %s: refused an action approval past the limit", conversation)
            return ActionDecision(False, TOO_MANY_PENDING, None)
        self._pending[conversation] = self._pending.get(conversation, 0) + 1
        try:
            return await self._ask(request)
        finally:
            self._pending[conversation] -= 1
            if not self._pending[conversation]:
                del self._pending[conversation]

    async def _ask(self, request: ActionRequest) -> ActionDecision:
        if request.task_id is None:  # the proxy knows the conversation only
            running = await self._running_task(request.conversation_id)
            request = dataclasses.replace(request, task_id=running)
        origin = await self._origin(request)
        record = await self._records.create(
            conversation_id=request.conversation_id,
            task_id=request.task_id,
            kind=request.kind,
            summary=request.summary,
            details=request.details,
            rule=request.rule,
            signature=request.signature,
            options=request.options,
            requester_id=origin.sender_id if origin is not None else None,
            expires_at=time.time() + self._timeout_s,
        )
        future: asyncio.Future[ActionDecision] = asyncio.get_running_loop().create_future()
        self._waiting[record.code] = future
        await self._tell_waiting(request.task_id, request.summary)
        try:
            if origin is None:
                log.warning(
                    "action approval %s: conversation %s has no message to card; denied",
                    record.code,
                    request.conversation_id,
                )
                return await self._close(
                    record.code, EXPIRED, "expiry", "nobody could be asked (no conversation)"
                )
            try:
                await self._post(record, origin)
            except Exception:
                log.warning("could not post action approval card %s", record.code, exc_info=True)
                return await self._close(
                    record.code, EXPIRED, "expiry", "the card could not be posted"
                )
            log.info(
                "action approval %s (%s) asked in conversation %s: %s",
                record.code,
                request.kind,
                request.conversation_id,
                request.summary,
            )
            try:
                return await self._wait(record.code, future)
            except TimeoutError:
                why = f"no answer within {self._timeout_s:g} s"
                if request.kind == "question":
                    why = f"nobody answered the question within {self._timeout_s:g} s"
                return await self._close(record.code, EXPIRED, "expiry", why)
        except asyncio.CancelledError:
            state = ABANDONED if self._shutting_down else CANCELLED
            await asyncio.shield(self._close(record.code, state, "task ended", "cancelled"))
            raise
        finally:
            self._waiting.pop(record.code, None)
            await self._tell_waiting(request.task_id, None)

    async def knows(self, code: str) -> bool:
        return await self._records.get(code.strip()) is not None

    async def decide(
        self,
        channel: str,
        decider_id: str,
        decider_name: str,
        code: str,
        choice: str,
        reason: str = "",
    ) -> str | None:
        """A press or ``!allow``/``!deny``/``!answer``: the line for the decider, or None
        when they may not decide (recorded; nothing changes). ``choice`` is once, always,
        deny, an option's index, or ``text`` (a free answer in ``reason``)."""
        record = await self._records.get(code.strip())
        if record is None:
            return f"There is no action approval {code}."
        if not await self._may_decide(record, channel, decider_id):
            await self._records.record_refusal(record.code, channel, decider_id)
            log.warning(
                "refused decision on action approval %s by %s (%s): may not decide",
                record.code,
                decider_id,
                channel,
            )
            return None
        who = decider_name or decider_id
        if record.kind != "question" and choice not in ("once", "always", "deny"):
            return f"{record.code} is not a question: use !allow or !deny."
        if record.kind == "question" and choice == "deny":
            text = f"{who} declined to answer" + (f": {reason}" if reason else "")
            decision = ActionDecision(False, text, who)
            state, saved_reason = DENIED, reason
        elif record.kind == "question":
            answer = answer_of(record, choice, reason)
            if answer is None:
                return f"That is not one of the options of {record.code}."
            decision = ActionDecision(True, f"{who} answered", who, answer)
            state, saved_reason = ALLOWED, ""
        elif choice in ("once", "always"):
            decision = ActionDecision(True, f"allowed by {who}", who)
            state, saved_reason = ALLOWED, "always" if choice == "always" else ""
        else:
            text = f"denied by {who}" + (f": {reason}" if reason else "")
            decision = ActionDecision(False, text, who)
            state, saved_reason = DENIED, reason
        async with self._lock:
            if not await self._records.decide(
                record.code, state, who, saved_reason, decision.answer
            ):
                current = await self._records.get(record.code)
                done = current.state if current is not None else record.state
                return f"Action approval {record.code} was already {done}."
            if state == ALLOWED and saved_reason == "always":
                await self._records.add_rule(record.conversation_id, record.signature, who)
            await self._close_card(record.code)
        future = self._waiting.get(record.code)
        if future is not None and not future.done():
            future.set_result(decision)
        log.info("action approval %s: %s by %s", record.code, state, who)
        if record.kind == "question" and decision.allowed:
            return f"Answered {record.code}: {decision.answer}"
        verb = "Allowed" if state == ALLOWED else "Denied"
        return f"{verb} {record.code}" + (
            " (always in this conversation)." if saved_reason == "always" else "."
        )

    async def answer_reply(self, conversation_id: str, message: InboundMessage) -> str | None:
        """A message in a conversation with a question pending answers it (the oldest), when
        its sender may; None when there is no such question (the message is a message)."""
        for record in await self._records.pending_in(conversation_id, "question"):
            # Under replicas the asking run may wait on another replica; a pending question
            # is a live run's (``abandon_in`` closed those of runs that are gone).
            if record.code in self._waiting or self._poll_s is not None:
                return await self.decide(
                    message.channel,
                    message.sender_id,
                    message.sender_name,
                    record.code,
                    "text",
                    message.body.strip(),
                )
        return None

    async def _wait(self, code: str, future: asyncio.Future[ActionDecision]) -> ActionDecision:
        """The decision, from a press heard here (the future) or, under replicas, from the
        row another replica decided; TimeoutError after ``timeout_s``."""
        if self._poll_s is None:
            return await asyncio.wait_for(asyncio.shield(future), self._timeout_s)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_s
        while (left := deadline - loop.time()) > 0:
            try:
                return await asyncio.wait_for(asyncio.shield(future), min(self._poll_s, left))
            except TimeoutError:
                record = await self._records.get(code)
                if record is not None and record.state != PENDING:
                    log.info(
                        "action approval %s: %s (recorded by another replica)", code, record.state
                    )
                    return decision_of(record)
        raise TimeoutError

    async def _close(self, code: str, state: str, by: str, reason: str) -> ActionDecision:
        async with self._lock:
            if await self._records.decide(code, state, by, reason):
                await self._close_card(code)
                return ActionDecision(False, reason, None)
        # Decided meanwhile (a press raced the timeout): that decision stands.
        future = self._waiting.get(code)
        if future is not None and future.done():
            return future.result()
        record = await self._records.get(code)
        return decision_of(record) if record is not None else ActionDecision(False, reason, None)

    async def _may_decide(self, record: ActionApprovalRecord, channel: str, who: str) -> bool:
        if self._access.may_decide(channel, who):
            return True
        if self._deciders is Deciders.OWNERS:
            return False
        origin = await self._origin_of(record.conversation_id, record.task_id)
        # The card's channel; until ``set_card`` wrote it (a press can arrive between the
        # card's post and that write), the channel of the message whose task asks.
        card_channel = record.card_channel or (origin.channel if origin is not None else None)
        if card_channel != channel:
            return False
        if record.requester_id == who:
            return True
        return origin is not None and await self._store.approvals.is_member(
            channel, origin.room, who
        )

    async def _running_task(self, conversation_id: str) -> str | None:
        running = await self._store.conversation_tasks(conversation_id, [TaskState.EXECUTING])
        return running[-1].id if running else None

    async def _origin(self, request: ActionRequest) -> InboundMessage | None:
        return await self._origin_of(request.conversation_id, request.task_id)

    async def _origin_of(self, conversation_id: str, task_id: str | None) -> InboundMessage | None:
        """The message whose task asks: where the card goes and who asked."""
        if task_id is not None:
            return (await self._store.get_task(task_id)).parsed
        running = await self._store.conversation_tasks(conversation_id, [TaskState.EXECUTING])
        for task in reversed(running):
            if task.parsed is not None:
                return task.parsed
        return None

    async def _post(self, record: ActionApprovalRecord, origin: InboundMessage) -> None:
        adapter = self._adapters.get(origin.channel)
        if adapter is None:
            return
        context = origin.channel_context
        buttons = isinstance(adapter, CardButtons)
        card = pending_card(record, buttons=buttons)
        ref = await post_card(
            adapter, context, card, as_text(card), f"posting action approval card {record.code}"
        )
        await self._records.set_card(record.code, origin.channel, context, ref)

    async def _close_card(self, code: str) -> None:
        record = await self._records.get(code)
        if record is None or record.state == PENDING or record.card_channel is None:
            return
        adapter = self._adapters.get(record.card_channel)
        card = closed_card(record, self._timezone)
        try:
            if isinstance(adapter, CardButtons) and record.card_ref:
                await adapter.update_card(record.card_context or {}, record.card_ref, card)
            elif adapter is not None and record.state in (EXPIRED, ABANDONED):
                await adapter.send_rejection(record.card_context or {}, as_text(card))
        except Exception:
            log.warning("could not update action approval card %s", code, exc_info=True)

    async def _tell_waiting(self, task_id: str | None, what: str | None) -> None:
        if self.on_waiting is None or task_id is None:
            return
        try:
            await self.on_waiting(task_id, what)
        except Exception:
            log.warning("could not show task %s waiting for approval", task_id, exc_info=True)
