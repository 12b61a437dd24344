"""A task's action approvals in its timeline (decision 0087): what was asked, by which rule, who
decided what and when, and whose presses were refused."""

from __future__ import annotations

from gateway_bot.core.conversations.timeline import TimelineEntry
from gateway_bot.state.action_approvals_store import (
    ALLOWED,
    DENIED,
    PENDING,
    SqlActionApprovals,
)


async def action_entries(records: SqlActionApprovals, task_id: str) -> list[TimelineEntry]:
    entries: list[TimelineEntry] = []
    for record in await records.of_task(task_id):
        rule = f" (rule {record.rule})" if record.rule else ""
        asked = "asked a question" if record.kind == "question" else "asked to run"
        entries.append(
            TimelineEntry(record.created_at, "approval", f"{asked} {record.summary}{rule}")
        )
        for channel, who in await records.refusals(record.code):
            entries.append(TimelineEntry(None, "approval", f"refused a press by {who} ({channel})"))
        if record.state == PENDING:
            text = f"waiting for an answer (code {record.code})"
            entries.append(TimelineEntry(None, "approval", text, record.code))
        elif record.kind == "question" and record.state == ALLOWED:
            text = f"answered by {record.decided_by}: {record.answer}"
            entries.append(TimelineEntry(record.decided_at, "approval", text))
        elif record.state in (ALLOWED, DENIED):
            verb = "allowed" if record.state == ALLOWED else "denied"
            how = " always in this conversation" if record.reason == "always" else ""
            why = f": {record.reason}" if record.state == DENIED and record.reason else ""
            text = f"{verb}{how} by {record.decided_by}{why}"
            entries.append(TimelineEntry(record.decided_at, "approval", text))
        else:
            text = f"{record.state} ({record.reason or record.decided_by})"
            entries.append(TimelineEntry(record.decided_at, "approval", text))
    return entries
