"""``agent.budget_usd``: a conversation asks before the turn that would take it past its
budget (decision 0087). What a turn will cost is not known before it runs: the last turn's cost
stands in for it, so the question comes before the turn that would likely cross the line
(and before every turn once the budget is spent). "Always in this conversation" on that
card lets this conversation spend past this budget without asking again."""

from __future__ import annotations

from collections.abc import Sequence

from gateway_bot.core.actions.approvals import ActionRequest
from gateway_bot.domain.records import TaskRecord

BUDGET_RULE = "agent.budget_usd"


def spent_and_last(tasks: Sequence[TaskRecord]) -> tuple[float, float]:
    """The conversation's spend so far and its latest finished turn's cost."""
    finished = [t for t in tasks if t.completed_at is not None]
    finished.sort(key=lambda t: t.completed_at or 0.0)
    spent = sum(t.cost_usd for t in tasks)
    return spent, (finished[-1].cost_usd if finished else 0.0)


def budget_request(
    conversation_id: str, task_id: str, budget_usd: float, spent: float, last: float
) -> ActionRequest | None:
    """The question to ask before this turn, None when it likely stays within the budget."""
    if spent + last <= budget_usd:
        return None
    return ActionRequest(
        conversation_id=conversation_id,
        task_id=task_id,
        kind="budget",
        summary=f"spend past this conversation's ${budget_usd:.2f} budget",
        details=(
            f"This conversation has spent ${spent:.4f} of its ${budget_usd:.2f} budget; its "
            f"last turn cost ${last:.4f}, so this one would likely go past it."
        ),
        rule=BUDGET_RULE,
        signature=f"budget {budget_usd:.2f}",
    )
