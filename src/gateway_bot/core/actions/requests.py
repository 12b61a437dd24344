"""What asking for an action and answering exchange: the request a layer puts to a person
(``ActionRequest``), the decision it gets back (``ActionDecision``), the ``AskAction`` the
asking layers are given, and how a decided row or a typed answer reads as a decision.

Apart from ``ActionApprovals`` (core/actions/approvals.py: cards, waits, records, who may
decide) because these are plain values and pure functions with no state, channel or
replica in them: the layers that ask (the tool-call hook, the proxy, the budget) need
only the values, and the readings can be checked without a running approval service.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway_bot.state.action_approvals_store import ALLOWED, DENIED, ActionApprovalRecord


@dataclass(frozen=True)
class ActionRequest:
    """One thing the agent wants to do that a person must allow first."""

    conversation_id: str
    task_id: str | None
    """The task whose run asks; None when the asker knows only the conversation (the
    proxy): the conversation's running task is then carded."""
    kind: str
    """"tool" | "network" | "question" | "budget"."""
    summary: str
    """One line: the card's title (``git push origin main``; a question's text)."""
    details: str
    """What exactly would happen, shown verbatim (command and working directory, file and
    diff summary, method host path and pushed refs)."""
    rule: str
    """Which rule asked (``Bash "git push*": ask``)."""
    signature: str
    """What "Always in this conversation" remembers; identical signatures are the same
    action (``tool Bash git push origin main``, ``network POST github.com /x/y.git/...``)."""
    options: tuple[str, ...] = ()
    """A question's options, one button each; empty for everything else."""


@dataclass(frozen=True)
class ActionDecision:
    allowed: bool
    reason: str
    """For the agent: why not (a person's reason, "no answer within 600 s"), or how it was
    allowed."""
    decided_by: str | None
    """Who decided; None for a rule, the timeout or the end of the task."""
    answer: str | None = None
    """A question's answer (the chosen option or the free text); None otherwise."""


MAX_PENDING_PER_CONVERSATION = 5
"""Requests of one conversation waiting for a decision at once. The agent decides how many
it makes (fifty pushes through its proxy at once were fifty cards in the people's chat and
fifty held requests in the daemon); a few at once is what a person decides anyway."""
TOO_MANY_PENDING = (
    f"{MAX_PENDING_PER_CONVERSATION} requests of this conversation already wait for a "
    "decision: try again once they are decided"
)

AskAction = Callable[[ActionRequest], Awaitable[ActionDecision]]
"""``ActionApprovals.ask``: what the layers that ask are given."""


def decision_of(record: ActionApprovalRecord) -> ActionDecision:
    """A decided row as ``decide`` made it (for a decision made elsewhere: another replica,
    or a press that raced the timeout)."""
    who = record.decided_by
    because = f": {record.reason}" if record.reason else ""
    if record.state == ALLOWED and record.kind == "question":
        return ActionDecision(True, f"{who} answered", who, record.answer)
    if record.state == ALLOWED:
        return ActionDecision(True, f"allowed by {who}", who)
    if record.state == DENIED and record.kind == "question":
        return ActionDecision(False, f"{who} declined to answer{because}", who)
    if record.state == DENIED:
        return ActionDecision(False, f"denied by {who}{because}", who)
    return ActionDecision(False, record.reason or record.state, None)


def answer_of(record: ActionApprovalRecord, choice: str, text: str) -> str | None:
    if choice.isdigit():
        index = int(choice)
        return record.options[index] if 0 <= index < len(record.options) else None
    if text.isdigit() and 1 <= int(text) <= len(record.options):
        return record.options[int(text) - 1]
    return text or None
