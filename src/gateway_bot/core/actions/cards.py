"""What people read on an action approval card (decision 0087), pending and closed.

The card shows exactly what would run (the command or file verbatim in a code block: the
agent wrote it, so no markdown in it is rendered), the working directory and the rule that
asked. Action ids are ``action:CODE:once|always|deny`` and ``question:CODE:N`` so neither
the sender gate (``approval:``) nor schedule proposals (``schedule:``) mistake them.
"""

from __future__ import annotations

import datetime
from zoneinfo import ZoneInfo

from gateway_bot.core.admission.cards import plain, preview
from gateway_bot.domain.messages import Button, Card
from gateway_bot.state.action_approvals_store import (
    ABANDONED,
    ALLOWED,
    CANCELLED,
    DENIED,
    EXPIRED,
    ActionApprovalRecord,
)

ACTION_PREFIX = "action"
QUESTION_PREFIX = "question"
CHOICES = ("once", "always", "deny")
OPTION_EMOJI = ("1️⃣", "2️⃣", "3️⃣", "4️⃣", "5️⃣", "6️⃣", "7️⃣", "8️⃣", "9️⃣")
"""A Matrix card's buttons are reactions: one distinct emoji per option."""
MAX_OPTIONS = len(OPTION_EMOJI)


def action_id(code: str, choice: str) -> str:
    return f"{ACTION_PREFIX}:{code}:{choice}"


def parse_action_id(value: str) -> tuple[str, str] | None:
    """``(code, choice)`` for an action card's button: choice is once, always or deny, or
    the index of a question's option."""
    parts = value.split(":")
    if len(parts) != 3:
        return None
    if parts[0] == ACTION_PREFIX and parts[2] in CHOICES:
        return parts[1], parts[2]
    if parts[0] == QUESTION_PREFIX and parts[2].isdigit():
        return parts[1], parts[2]
    return None


def pending_card(request: ActionApprovalRecord, *, buttons: bool) -> Card:
    code = request.code
    if request.kind == "question":
        options = "\n".join(
            f"{index + 1}. {plain(option)}" for index, option in enumerate(request.options)
        )
        how = (
            f"Press an option, or reply `!answer {code} YOUR ANSWER`."
            if buttons
            else f"Reply `!answer {code} N` (the option's number) or `!answer {code} TEXT`."
        )
        return Card(
            title="The agent asks a question",
            body=f"{preview(request.summary)}\n\n{options}\n\n{how}",
            buttons=tuple(
                Button(
                    plain(option)[:70] or str(index + 1),
                    f"{QUESTION_PREFIX}:{code}:{index}",
                    emoji=OPTION_EMOJI[index],
                )
                for index, option in enumerate(request.options[:MAX_OPTIONS])
            )
            if buttons
            else (),
        )
    if buttons:
        how = f"Or reply `!allow {code}`, or `!deny {code} REASON` (the agent reads the reason)."
    else:
        how = (
            f"Reply `!allow {code}` to run it once, `!allow {code} always` to allow it for "
            f"this conversation, `!deny {code} REASON` to refuse (the agent reads the reason)."
        )
    asks = _TITLES.get(request.kind, _TITLES["tool"])
    return Card(
        title=f"{asks}: {_shorten(plain(request.summary), 80)}",
        body=(
            f"{preview(request.details)}\n\nAsked by the rule `{plain(request.rule)}`. "
            f"Nothing runs unless someone who may decide allows it. {how}"
        ),
        buttons=(
            Button("Allow once", action_id(code, "once"), emoji="✅", style="primary"),
            Button("Always in this conversation", action_id(code, "always"), emoji="♾️"),
            Button("Deny", action_id(code, "deny"), emoji="❌", style="danger"),
        )
        if buttons
        else (),
    )


def closed_card(request: ActionApprovalRecord, timezone: str) -> Card:
    when = datetime.datetime.fromtimestamp(request.decided_at or 0, ZoneInfo(timezone))
    at = f"{when:%Y-%m-%d %H:%M} {timezone}"
    who = plain(request.decided_by or "")
    if request.state == EXPIRED:
        outcome = f"Expired at {at}: nobody answered, so it was denied."
    elif request.state == CANCELLED:
        outcome = f"Closed at {at}: the task ended before anyone answered."
    elif request.state == ABANDONED:
        outcome = "Closed: the bot restarted while this was pending; the task asks again."
    elif request.kind == "question":
        outcome = f"Answered by {who} at {at}: {plain(request.answer or '')}"
    elif request.state == ALLOWED:
        always = " (always in this conversation)" if request.reason == "always" else ""
        outcome = f"Allowed by {who} at {at}{always}."
    elif request.state == DENIED:
        why = f" Reason: {plain(request.reason)}" if request.reason else ""
        outcome = f"Denied by {who} at {at}.{why}"
    else:
        outcome = request.state
    title = "The agent's question" if request.kind == "question" else "The agent asked to run"
    return Card(title=title, body=f"{preview(request.details)}\n\n{outcome}", buttons=())


_TITLES = {
    "tool": "The agent asks to run",
    "network": "The agent's sandbox asks to send",
    "budget": "The agent asks to",
}


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def as_text(card: Card) -> str:
    return f"**{card.title}**\n\n{card.body}"
