"""Every decision a person is waiting on, of every kind, as one list: strangers and rooms
(the gate's sender approvals, ``core/admission/``), the agent's actions, network writes,
questions and budget (``core/actions/``), and schedules the agent proposes
(``core/schedules/proposals.py``). And deciding one by its code, through the same object a
card's button reaches for that kind, as an identity the caller names: the owners' lists
(and, for actions, the conversation's deciders) say who may, never the front end.

Why one list: each kind was built with its own card and store, and a front end that knew
only the first kind (the dashboard's approvals page) showed "nothing is waiting" while an
agent's ``git push`` waited for a decision. A task waiting for one of them is found here
too (``waiting_tasks``), so it is shown as waiting, with what for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway_bot.core.actions.approvals import ActionApprovals
from gateway_bot.core.admission.gate import Gatekeeper
from gateway_bot.core.schedules.proposals import ScheduleProposals, rule_of
from gateway_bot.state.action_approvals_store import ActionApprovalRecord, SqlActionApprovals
from gateway_bot.state.schedule_proposals_store import ProposalRecord, SqlScheduleProposals
from gateway_bot.state.store import Store

KIND_LABELS = {
    "sender": "A new sender",
    "room": "An invitation",
    "tool": "An agent action",
    "network": "A network write",
    "question": "The agent's question",
    "budget": "Over budget",
    "schedule": "A schedule the agent proposes",
}
"""What each kind is called where people read it."""


@dataclass(frozen=True)
class Choice:
    value: str
    """What ``decide`` is given: allow, deny, once, always, or a question option's index."""
    label: str
    danger: bool = False


ALLOW_DENY = (Choice("allow", "Allow"), Choice("deny", "Deny", danger=True))
ONCE_ALWAYS_DENY = (
    Choice("once", "Allow once"),
    Choice("always", "Always here"),
    Choice("deny", "Deny", danger=True),
)


@dataclass(frozen=True)
class PendingDecision:
    code: str
    kind: str
    """sender, room, tool, network, question, budget or schedule."""
    channel: str
    """The channel whose owners (and, for actions, conversation) decide it: a front end
    decides as its identity on this channel."""
    title: str
    """One line: the command, the question, who wants in, the schedule's rule."""
    details: str
    """Shown verbatim (it may be the agent's or a stranger's text)."""
    asked_by: str
    conversation_id: str | None
    task_ids: tuple[str, ...]
    """The tasks waiting for it (an action's run; a stranger's held messages)."""
    created_at: float
    expires_at: float | None
    choices: tuple[Choice, ...]
    free_answer: bool = False
    """A question also takes a typed answer."""

    @property
    def kind_label(self) -> str:
        return KIND_LABELS.get(self.kind, self.kind)

    @property
    def waiting_text(self) -> str:
        """What a task waiting for it waits for, in one line."""
        return f"{self.kind_label.lower()}: {self.title} (code {self.code})"


async def pending_decisions(
    store: Store,
    actions: SqlActionApprovals | None,
    proposals: SqlScheduleProposals | None,
) -> list[PendingDecision]:
    """Everything pending now, oldest first."""
    found: list[PendingDecision] = []
    for approval in await store.pending_approvals():
        held = tuple(await store.approvals.held_tasks(approval.code))
        where = approval.room_title or approval.room
        if approval.kind == "room":
            title = f"{approval.sender_name} invites the bot to {where}"
        else:
            title = f"{approval.sender_name} ({approval.sender_id}) in {where}"
        found.append(
            PendingDecision(
                code=approval.code,
                kind=approval.kind,
                channel=approval.channel,
                title=title,
                details=approval.preview,
                asked_by=approval.sender_id,
                conversation_id=None,
                task_ids=held,
                created_at=approval.created_at,
                expires_at=approval.expires_at,
                choices=ALLOW_DENY,
            )
        )
    if actions is not None:
        for record in await actions.pending():
            found.append(await _action(store, record))
    if proposals is not None:
        found.extend(_proposal(p) for p in await proposals.pending())
    found.sort(key=lambda d: d.created_at)
    return found


async def _action(store: Store, record: ActionApprovalRecord) -> PendingDecision:
    channel = record.card_channel
    if channel is None:
        try:
            channel = (await store.get_conversation(record.conversation_id)).channel
        except KeyError:
            channel = ""
    if record.kind == "question":
        choices = tuple(Choice(str(n), option) for n, option in enumerate(record.options))
        choices += (Choice("deny", "Decline", danger=True),)
    else:
        choices = ONCE_ALWAYS_DENY
    return PendingDecision(
        code=record.code,
        kind=record.kind,
        channel=channel,
        title=record.summary,
        details=record.details + (f"\n(rule {record.rule})" if record.rule else ""),
        asked_by=record.requester_id or "",
        conversation_id=record.conversation_id,
        task_ids=(record.task_id,) if record.task_id else (),
        created_at=record.created_at,
        expires_at=record.expires_at,
        choices=choices,
        free_answer=record.kind == "question",
    )


def _proposal(proposal: ProposalRecord) -> PendingDecision:
    return PendingDecision(
        code=proposal.code,
        kind="schedule",
        channel=proposal.channel,
        title=rule_of(proposal).describe(),
        details=proposal.prompt,
        asked_by=proposal.requester_id,
        conversation_id=None,
        task_ids=(),
        created_at=proposal.created_at,
        expires_at=None,
        choices=ALLOW_DENY,
    )


def waiting_tasks(decisions: Sequence[PendingDecision]) -> dict[str, PendingDecision]:
    """Task id -> the decision it waits for (the oldest, when several)."""
    waiting: dict[str, PendingDecision] = {}
    for decision in decisions:
        for task_id in decision.task_ids:
            waiting.setdefault(task_id, decision)
    return waiting


async def decide(
    decision: PendingDecision,
    choice: str,
    *,
    decider_id: str,
    gate: Gatekeeper,
    actions: ActionApprovals | None,
    proposals: ScheduleProposals | None,
    answer: str = "",
) -> str | None:
    """Decide ``decision`` as ``decider_id`` on its channel, as that kind's button does.
    Returns the decider's line; None when that identity may not decide it. Raises
    ValueError for a choice the kind does not offer."""
    offered = {c.value for c in decision.choices}
    if decision.free_answer and answer.strip():
        choice = "text"
    elif choice not in offered:
        raise ValueError(f"{decision.code} is not decided with {choice!r}")
    channel = decision.channel
    if decision.kind in ("sender", "room"):
        return await gate.decide(channel, decider_id, decider_id, decision.code, choice)
    if decision.kind == "schedule":
        if proposals is None:
            raise ValueError("schedule proposals are not on in this daemon")
        return await proposals.decide(channel, decider_id, decider_id, decision.code, choice)
    if actions is None:
        raise ValueError("action approvals are not on in this daemon")
    return await actions.decide(
        channel, decider_id, decider_id, decision.code, choice, answer.strip()
    )
