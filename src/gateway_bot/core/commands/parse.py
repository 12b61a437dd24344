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

Arguments that name something (a person for /revoke, a code, a model) are read as a shell
reads words (``shlex``: ``/revoke "Jane Doe" everywhere`` names one person); free text after
them (/deny's reason, /answer's text) stays as typed, apostrophes and all.
"""

from __future__ import annotations

import enum
import io
import re
import shlex
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


class ArgumentError(ValueError):
    """A command's words cannot be read (a quote left open): its text is the answer."""


_CURLY_DOUBLE_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"'})
"""What a phone's keyboard types for ": read as the plain quote (single curly quotes are
left alone: they are apostrophes in names and prose)."""


def leading_words(argument: str, count: int) -> tuple[list[str], str]:
    """The first ``count`` words of ``argument`` (quotes group, as in a shell; no ``#``
    comments or backslash escapes, which chat text is full of) and the rest as typed.

    Raises ArgumentError when a quote in those words is not closed."""
    stream = io.StringIO(argument.translate(_CURLY_DOUBLE_QUOTES))
    lexer = shlex.shlex(stream, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    lexer.escape = ""
    words: list[str] = []
    try:
        while len(words) < count and (word := lexer.get_token()) is not None:
            words.append(word)
    except ValueError:
        raise ArgumentError(
            'a quote is not closed: close it ("like this") or leave the quotes out. '
            "Nothing was done."
        ) from None
    return words, stream.read().strip()  # the lexer reads no further than it must


def command_words(argument: str) -> list[str]:
    """Every word of ``argument``, read as ``leading_words`` reads them."""
    return leading_words(argument, len(argument) + 1)[0]


def free_text(text: str) -> str:
    """Free text as typed, unless it is one quoted whole (``"yes, go ahead"``): then
    without its quotes."""
    if text[:1] not in ("'", '"', "\u201c") or len(text) < 2:
        return text
    try:
        words, rest = leading_words(text, 1)
    except ArgumentError:
        return text
    return words[0] if not rest else text


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
