"""The tasks and conversations lists' filters as a URL holds them: read from a request's
query (a GET form, so a filtered list is a link to share and works without scripts), and
written back for the next page's link and the live stream's.

Values a person typed are checked before they reach the store: a date is
``YYYY-MM-DD`` (local time; ``to`` includes its whole day), a state one of the words the
lists know, a cursor two numbers. What does not read is reported on the page and left out
of the filter, never guessed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlencode

from gateway_bot.core.status.overview import DAY_S, STATE_WORDS, state_filter
from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from gateway_bot.state.task_lists import ConversationFilter, Cursor, TaskFilter

__all__ = [
    "CONVERSATION_STATES",
    "STATE_WORDS",
    "Filters",
    "conversation_filter",
    "read_cursor",
    "read_offset",
    "task_filter",
    "write_cursor",
]

TEXT_LIMIT = 200
"""Longest sender or search text taken (a URL is no place for a novel)."""
CONVERSATION_STATES = ("active", "ended")
TASK_FIELDS = ("state", "channel", "sender", "from", "to", "q")


@dataclass(frozen=True)
class Filters:
    """The list's filters as typed (for the form and the links) and what was wrong."""

    values: dict[str, str]
    problems: list[str] = field(default_factory=list)

    def query(self, **extra: str) -> str:
        """The filters (and ``extra``) as a query string, empty fields left out."""
        shown = {k: v for k, v in {**self.values, **extra}.items() if v}
        return urlencode(shown)

    @property
    def any(self) -> bool:
        return any(self.values.values())


def _text(query: Mapping[str, str], name: str) -> str:
    return " ".join(query.get(name, "").split())[:TEXT_LIMIT]


def _day(text: str, name: str, problems: list[str]) -> float | None:
    if not text:
        return None
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%d"))
    except (ValueError, OverflowError):
        problems.append(f"The date {name} must be written YYYY-MM-DD, not {text!r}.")
        return None


def read_filters(query: Mapping[str, str], fields: tuple[str, ...]) -> Filters:
    return Filters({name: _text(query, name) for name in fields})


def task_filter(query: Mapping[str, str]) -> tuple[Filters, TaskFilter]:
    filters = read_filters(query, TASK_FIELDS)
    values, problems = filters.values, filters.problems
    states: tuple[TaskState, ...] = ()
    reasons: tuple[CompletionReason, ...] = ()
    if values["state"]:
        try:
            states, reasons = state_filter(values["state"])
        except KeyError:
            problems.append(f"There is no state {values['state']!r}: {', '.join(STATE_WORDS)}.")
            values["state"] = ""
    since = _day(values["from"], "from", problems)
    until = _day(values["to"], "to", problems)
    which = TaskFilter(
        states=states,
        reasons=reasons,
        channel=values["channel"],
        sender=values["sender"],
        since=since,
        until=until + DAY_S if until is not None else None,
        words=values["q"],
    )
    return filters, which


def conversation_filter(query: Mapping[str, str]) -> tuple[Filters, ConversationFilter]:
    filters = read_filters(query, TASK_FIELDS)
    values, problems = filters.values, filters.problems
    active = None
    if values["state"]:
        if values["state"] in CONVERSATION_STATES:
            active = values["state"] == "active"
        else:
            problems.append(f"A conversation is {' or '.join(CONVERSATION_STATES)}.")
            values["state"] = ""
    since = _day(values["from"], "from", problems)
    until = _day(values["to"], "to", problems)
    which = ConversationFilter(
        channel=values["channel"],
        active=active,
        sender=values["sender"],
        since=since,
        until=until + DAY_S if until is not None else None,
        words=values["q"],
    )
    return filters, which


def read_cursor(text: str) -> Cursor | None:
    """``after=<created_at>_<rowid>`` as the previous page wrote it; None otherwise."""
    at, _, row = text.partition("_")
    if not (row.isascii() and row.isdigit() and len(row) <= 19 and len(at) <= 32):
        return None
    try:
        moment = float(at)
    except ValueError:
        return None
    return (moment, int(row)) if math.isfinite(moment) else None


def write_cursor(cursor: Cursor) -> str:
    return f"{cursor[0]!r}_{cursor[1]}"


def read_offset(text: str) -> int:
    if text.isascii() and text.isdigit() and len(text) <= 9:
        return int(text)
    return 0
