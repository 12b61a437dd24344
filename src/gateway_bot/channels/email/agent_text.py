"""The text the channel hands the core for a mail: the subject when it says something new,
a line when hidden content was removed, the sender's words, and a line for what could not
be read. The core puts it under its own header (sender, time, files) as the agent's prompt.

A mail whose text is a command (``/status``) is handed over as it is: the core recognises
commands only at the start of the text.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway_bot.channels.email.quotes import REMOVED, UNSURE
from gateway_bot.channels.email.reading import MailText
from gateway_bot.core.commands.parse import UnknownCommand, parse_command

HIDDEN_NOTE = (
    "[Hidden content in this mail was removed before you read it: text a mail client would "
    "not show, or invisible characters. Only what the sender could see is below.]"
)


@dataclass(frozen=True)
class AgentText:
    text: str
    """What the agent reads."""
    left_out: tuple[str, ...]
    """Sentences the reply tells the sender (what could not be read)."""


def agent_text(mail: MailText, subject: str | None) -> AgentText:
    """``subject``: the subject to show (the first mail of a thread, or a changed one),
    None when it says nothing new."""
    left_out = list(mail.left_out)
    words = mail.text
    if mail.whole is not None and not subject:
        words = mail.whole  # nothing of the sender's own found: all of it, and say so
        left_out.append(UNSURE)
    if _is_command(words):
        return AgentText(words, tuple(left_out))
    lines: list[str] = []
    if subject:
        lines.append(f"[Subject: {subject}]")
    if mail.hidden_removed:
        lines.append(HIDDEN_NOTE)
    head = "\n".join(lines)
    only_removed = words.strip() == REMOVED and bool(subject)
    body = "" if only_removed else words
    notes = "\n".join(f"[Could not be read: {line}.]" for line in left_out)
    text = "\n\n".join(part for part in (head, body, notes) if part.strip())
    return AgentText(text, tuple(left_out))


def _is_command(text: str) -> bool:
    try:
        return parse_command(text) is not None
    except UnknownCommand:
        return True


def reply_lines(left_out: tuple[str, ...] | list[str]) -> str:
    """The lines the reply carries for what was not read (one per problem)."""
    return "\n".join(f"Note: {line[0].upper()}{line[1:]}." for line in left_out)
