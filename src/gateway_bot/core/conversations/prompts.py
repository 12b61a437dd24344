"""What the agent reads: the user's words plus a short header, built from plain data."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from zoneinfo import ZoneInfo

from gateway_bot.domain.messages import InboundMessage
from gateway_bot.sandbox.base import SandboxPaths


def build_prompt(
    message: InboundMessage,
    paths: SandboxPaths,
    saved_attachments: Sequence[str],
    timezone: str,
) -> str:
    """The sender, their local time, the files they sent, then their message."""
    when = datetime.datetime.fromtimestamp(message.received_at, ZoneInfo(timezone))
    lines = [
        f"[Message from {message.sender_name} <{message.sender_id}> via {message.channel}, "
        f"{when:%Y-%m-%d %H:%M} {timezone}]",
        f"[Put files you want to send back in {paths.outbox}/]",
        f"[To propose a scheduled run here, write {paths.outbox}/schedule.json: "
        '{"when": "every weekday at 9:00" or a cron rule or "in 2 hours", "prompt": "...", '
        '"tz": "Europe/Berlin" (optional)}; it runs only if the user allows it]',
    ]
    if message.context:
        lines.append("[Earlier messages here that were not addressed to you, for context:]")
        lines += [f"[context] {line}" for line in message.context]
        lines.append("[End of context]")
    if saved_attachments:
        names = ", ".join(f"{paths.inbox}/{name}" for name in saved_attachments)
        lines.append(f"[Attached files: {names}]")
    elif message.attachments:
        # A channel that cannot fetch files, or refused them all: the agent should not
        # look for them, nor take "see the attached file" for a file it has.
        names = ", ".join(" ".join(a.filename.split()) for a in message.attachments)
        lines.append(f"[The sender attached files that did not reach you: {names}]")
    return "\n".join(lines) + "\n\n" + message.body


def context_lost_prompt(prompt: str, last_reply: str | None) -> str:
    """The prompt for a fresh session after the stored one could not be resumed."""
    note = (
        "[Note: the previous agent session of this conversation could not be resumed, so "
        "its context was lost. Ask the user if you need earlier details.]"
    )
    if last_reply:
        note += f"\n[Your last reply in this conversation was:]\n{last_reply}\n[End of last reply]"
    return note + "\n\n" + prompt
