"""Schedules the agent proposes: never created silently, only when a person allows them.

After a task whose agent left ``outbox/schedule.json`` (``core/schedules/request_file.py``),
the request is checked like ``/schedule`` (zone, rule, a run left, interval, the
conversation's limit) and the conversation gets a card: Allow / Deny buttons where the
channel has them (``CardButtons``), else a notice saying to reply ``!approve CODE`` or
``!deny CODE``, the same commands and the same card path as sender approvals
(``core/admission/gate.py``); action ids are ``schedule:CODE:allow`` so the gate never mistakes
one for its own. A request that cannot be used gets a note saying why, and no card.

Who decides: an owner or admin (as for any approval), or the person whose message the agent
was answering (the schedule would run as them, in their conversation). Anyone else's press
is ignored and changes nothing. Allow checks everything again (time has passed, the
conversation may be full) and creates the schedule as that person's /schedule would; Deny
creates nothing. A proposal is decided once (a guarded update), so two presses make at
most one schedule. A proposal nobody decided within ``access.approval_expiry_hours`` (the
expiry of sender approvals) expires when it is next pressed: a card found days later in a
scrolled-away room must not create a schedule its asker has long forgotten.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from gateway_bot.config.access import AccessSettings
from gateway_bot.core.admission.card_posting import TEXT_CARD_REF, post_card
from gateway_bot.core.admission.cards import plain, preview
from gateway_bot.core.channel import CardButtons, ChannelAdapter
from gateway_bot.core.commands.schedule import ScheduleCommands
from gateway_bot.core.schedules.request_file import (
    REQUEST_FILE,
    BadRequest,
    RequestFile,
)
from gateway_bot.core.schedules.rules import (
    Rule,
    ScheduleError,
    next_runs,
    parse_when,
    show_time,
)
from gateway_bot.domain.messages import Button, Card, InboundMessage
from gateway_bot.state.schedule_proposals_store import (
    ALLOWED,
    DENIED,
    EXPIRED,
    PENDING,
    ProposalRecord,
    SqlScheduleProposals,
)

log = logging.getLogger(__name__)

_ACTION_PREFIX = "schedule"


def proposal_action(code: str, choice: str) -> str:
    return f"{_ACTION_PREFIX}:{code}:{choice}"


def parse_proposal_action(action_id: str) -> tuple[str, str] | None:
    parts = action_id.split(":")
    if len(parts) != 3 or parts[0] != _ACTION_PREFIX or parts[2] not in ("allow", "deny"):
        return None
    return parts[1], parts[2]


def rule_of(proposal: ProposalRecord) -> Rule:
    return Rule(proposal.kind, proposal.expression, proposal.timezone)


class ScheduleProposals:
    def __init__(
        self,
        store: SqlScheduleProposals,
        commands: ScheduleCommands,
        access: AccessSettings,
        adapters: Mapping[str, ChannelAdapter],
    ) -> None:
        self._store = store
        self._commands = commands
        self._access = access
        self._adapters = adapters

    async def propose(self, task_id: str, message: InboundMessage, request: RequestFile) -> None:
        """Card the conversation of ``message`` (the task's) with the agent's request, or
        tell it why the request cannot be used. The card's post is retried on transport
        failures (``call_channel``); one that still fails leaves the proposal without a
        card, logged (the agent or the user can ask again)."""
        adapter = self._adapters.get(message.channel)
        if adapter is None:
            return
        context = message.channel_context
        if isinstance(request, BadRequest):
            log.warning("task %s: unusable schedule request: %s", task_id, request.problem)
            await adapter.send_rejection(
                context, f"The agent's schedule request was not used: {request.problem}."
            )
            return
        try:
            timezone = request.timezone or self._commands.zone_for(message)
            rule = parse_when(request.when, timezone, self._commands.clock())
        except ScheduleError as exc:
            await adapter.send_rejection(
                context, f"The agent's schedule request ({REQUEST_FILE}) was not used: {exc}"
            )
            return
        if refused := await self._commands.refusal(message, rule):
            await adapter.send_rejection(context, f"The agent asked to schedule a run. {refused}")
            return
        proposal = await self._store.create(
            message,
            rule.kind,
            rule.expression,
            rule.timezone,
            request.prompt,
            created_at=self._commands.clock(),
        )
        upcoming = next_runs(rule, self._commands.clock(), 3)
        buttons = isinstance(adapter, CardButtons)
        card = pending_card(proposal, message.sender_name, upcoming, buttons=buttons)
        log.info("task %s: the agent proposed schedule %s", task_id, proposal.code)
        ref = await post_card(
            adapter, context, card, as_text(card), f"posting schedule request card {proposal.code}"
        )
        await self._store.set_card(proposal.code, ref)

    async def knows(self, code: str) -> bool:
        """Is ``code`` a schedule proposal's (not a sender approval's)?"""
        return await self._store.get(code.strip()) is not None

    async def decide(
        self, channel: str, decider_id: str, decider_name: str, code: str, choice: str
    ) -> str | None:
        """Apply a press or ``!approve``/``!deny``; the answer for the decider, or None when
        they may not decide it (nothing changes)."""
        proposal = await self._store.get(code.strip())
        if proposal is None:
            return f"There is no schedule request {code}."
        asker = channel == proposal.channel and decider_id == proposal.requester_id
        if not (asker or self._access.may_decide(channel, decider_id)):
            log.warning(
                "ignored decision on schedule request %s by %s (%s): not the asker or an owner",
                proposal.code,
                decider_id,
                channel,
            )
            return None
        if proposal.state == PENDING and self._expired(proposal):
            return await self._expire(proposal)
        state = ALLOWED if choice == "allow" else DENIED
        if proposal.state != PENDING or not await self._store.decide(
            proposal.code, state, decider_name or decider_id
        ):
            current = await self._store.get(proposal.code)
            done = current.state if current is not None else proposal.state
            return f"Schedule request {proposal.code} was already {done}."
        if state == DENIED:
            outcome = f"Denied the agent's schedule request {proposal.code}: nothing was scheduled."
        else:
            rule = rule_of(proposal)
            outcome = await self._commands.create(proposal.origin, rule, proposal.prompt)
        await self._close_card(proposal, decider_name or decider_id, state, outcome)
        return outcome

    def _expired(self, proposal: ProposalRecord) -> bool:
        age = self._commands.clock() - proposal.created_at
        return age > self._access.approval_expiry_hours * 3600

    async def _expire(self, proposal: ProposalRecord) -> str:
        hours = f"{self._access.approval_expiry_hours:g}"
        outcome = (
            f"Schedule request {proposal.code} expired (undecided for {hours} h): nothing was"
            " scheduled. Ask the agent again if it is still wanted."
        )
        if await self._store.decide(proposal.code, EXPIRED, "expiry"):
            log.info("schedule request %s expired undecided", proposal.code)
            await self._close_card(proposal, "", EXPIRED, outcome)
        return outcome

    async def _close_card(
        self, proposal: ProposalRecord, decider: str, state: str, outcome: str
    ) -> None:
        adapter = self._adapters.get(proposal.channel)
        if proposal.card_ref is None or proposal.card_ref == TEXT_CARD_REF:
            return  # a text card: the !approve / !deny answer says what happened
        if not isinstance(adapter, CardButtons):
            return
        if state == EXPIRED:
            head = "Expired: nobody decided in time"
        else:
            head = f"{'Allowed' if state == ALLOWED else 'Denied'} by {plain(decider)}"
        card = Card(
            title="Schedule request of the agent",
            body=f"{head}:\n\n{preview(outcome)}",
            buttons=(),
        )
        try:
            await adapter.update_card(proposal.origin.channel_context, proposal.card_ref, card)
        except Exception:
            log.warning("could not update schedule request card %s", proposal.code, exc_info=True)


def pending_card(
    proposal: ProposalRecord, requester_name: str, upcoming: list[float], *, buttons: bool
) -> Card:
    """What the conversation reads: the normalized rule, the next runs and the prompt
    verbatim (a code block: the agent wrote it), and who may decide."""
    code = proposal.code
    runs = "; ".join(show_time(at, proposal.timezone) for at in upcoming)
    if buttons:
        how = f"Or reply !approve {code} or !deny {code}."
    else:
        how = f"Reply `!approve {code}` to create it, `!deny {code}` to drop it."
    return Card(
        title="The agent asks to schedule a run",
        body=(
            f"The agent asks to run this in this conversation, `{rule_of(proposal).describe()}`"
            f" (next: {runs}):\n\n{preview(proposal.prompt)}\n\n"
            f"Only {plain(requester_name)} ({plain(proposal.requester_id)}) or an owner can "
            f"decide; nothing is scheduled unless allowed. {how}"
        ),
        buttons=(
            Button("Allow", proposal_action(code, "allow"), emoji="✅", style="primary"),
            Button("Deny", proposal_action(code, "deny"), emoji="❌", style="danger"),
        )
        if buttons
        else (),
    )


def as_text(card: Card) -> str:
    return f"**{card.title}**\n\n{card.body}"
