"""Chat commands shared by every channel: /stop, /status, /new, /model NAME, /agent NAME,
/diff, /help,
/approve CODE and /deny CODE (owners and admins: how a channel without buttons decides an
approval card), /revoke (owners only), /mail (``conversation_mail.py``), and /schedule,
/schedules, /unschedule, /pause, /resume (``schedule_commands.py``). Their effects are
``chat_commands.py``'s.

``!`` works as a prefix too, for clients that swallow ``/``. A message that starts with the
prefix and a known word is a command; an unknown word gets a clear error listing the known
ones, rather than being sent to the agent by surprise. A path such as ``/etc/hosts is
broken`` is not a command: only a single lowercase word directly after the prefix is, or a
known command alone in any letter case (``/Stop`` as a phone capitalises it).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class CommandName(enum.Enum):
    STOP = "stop"
    STATUS = "status"
    NEW = "new"
    MODEL = "model"
    AGENT = "agent"
    HELP = "help"
    APPROVE = "approve"
    DENY = "deny"
    REVOKE = "revoke"
    DIFF = "diff"
    SCHEDULE = "schedule"
    SCHEDULES = "schedules"
    UNSCHEDULE = "unschedule"
    PAUSE = "pause"
    RESUME = "resume"
    MAIL = "mail"
    ALLOW = "allow"
    ANSWER = "answer"
    RULES = "rules"


HELP_TEXT = (
    "Commands: /stop (cancel the running task), /status (running task and queue), "
    "/new (start a fresh conversation), /model NAME (model for a new session: now if none "
    "started yet, else from the next /new), /agent NAME (agent CLI for a new session, "
    "likewise), /diff (the agent's changes not pushed yet), "
    "/approve CODE and /deny CODE (owners and admins: decide an approval card; also the "
    "person the agent answered: its schedule request), "
    "/revoke USER [everywhere | ROOM] (owners: take back an approval), "
    '/schedule [TZ=Zone] WHEN PROMPT (WHEN: a quoted cron rule "0 9 * * 1-5" or a phrase '
    "such as every weekday at 9:00, in 2 hours, tomorrow at 7:15), /schedules, "
    "/unschedule ID, /pause ID, /resume ID, "
    "/mail (send the latest reply to your address; a reply to it continues here), "
    "/allow CODE [always], /deny CODE [REASON] and /answer CODE TEXT (an action the agent "
    "asks to run, or its question), /rules (what this conversation allowed always), /help. "
    "`!` works instead of `/`."
)

_COMMAND = re.compile(r"^[/!]([A-Za-z][A-Za-z-]*)(?:\s+(.*))?$", re.DOTALL)


@dataclass(frozen=True)
class Command:
    name: CommandName
    argument: str


class UnknownCommand(ValueError):
    def __init__(self, word: str) -> None:
        super().__init__(f"Unknown command {word!r}. {HELP_TEXT}")
        self.word = word


def parse_command(body: str) -> Command | None:
    """Return the command in ``body``, None for an ordinary message.

    Raises UnknownCommand for ``/word`` where word is not a command.
    """
    match = _COMMAND.match(body.strip())
    if match is None:
        return None
    word, argument = match.group(1), (match.group(2) or "").strip()
    if word != word.lower():
        # "/Stop" alone, as a phone's keyboard capitalises it, is /stop; with more words
        # ("!Help me with the tests", "/Users is full") it stays text for the agent.
        known = {name.value for name in CommandName}
        if argument or word.lower() not in known:
            return None
        word = word.lower()
    try:
        name = CommandName(word)
    except ValueError:
        raise UnknownCommand(word) from None
    return Command(name=name, argument=argument)
