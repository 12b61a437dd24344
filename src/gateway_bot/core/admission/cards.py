"""What an owner reads on an approval card, pending and decided.

A card names the room by its title AND its id: a title is whatever the room's creator chose
(a stranger can call a room "Owner desk"), the id is not. A sender card quotes at most
``SHOWN_MESSAGES`` held messages and says how many more arrived; Allow runs only the quoted
ones, and the card says so, so the owner never approves words they did not see.
"""

from __future__ import annotations

import datetime
import re
import time
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from gateway_bot.domain.messages import Button, Card
from gateway_bot.domain.records import ApprovalRecord, ApprovalState

_ACTION_PREFIX = "approval"
SHOWN_MESSAGES = 3
"""A flood of messages is one card quoting the first few, not a card (or a quote) each. No
more than a conversation queues by default (one running, three waiting), so what Allow
releases is run, not refused as a full queue."""
_PREVIEW_LINES = 40
_PREVIEW_CHARS = 2000


@dataclass(frozen=True)
class HeldSummary:
    """The held messages as the card presents them."""

    shown: tuple[str, ...]
    """Bodies of the messages quoted on the card, oldest first."""
    total: int
    """Every message held under the approval, quoted or not."""


@dataclass(frozen=True)
class Outcome:
    """What a decision did with the held messages, for the decided card."""

    ran: int = 0
    dropped_unseen: int = 0


def approval_action(code: str, choice: str) -> str:
    return f"{_ACTION_PREFIX}:{code}:{choice}"


def parse_approval_action(action_id: str) -> tuple[str, str] | None:
    parts = action_id.split(":")
    if len(parts) != 3 or parts[0] != _ACTION_PREFIX or parts[2] not in ("allow", "deny"):
        return None
    return parts[1], parts[2]


def room_label(title: str, room: str) -> str:
    """``Team (!abc:hs)``: the title people know beside the id nobody can fake."""
    if not title or title == room:
        return plain(room)
    return f"{plain(title)} ({plain(room)})"


_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*\[\]<>&])")
"""What makes a link (``[x](y)``, an autolink ``<https://x>``), an image, emphasis, code or a
character reference (``&#8238;`` is a bidi override once rendered); ids (``!room:hs``,
``@u_1:hs``) have none."""
_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_HIDDEN = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")
"""Control and bidi characters: an override shows the rest of the line reversed, so a name
could make the id written after it read as someone else's."""


def plain(text: str) -> str:
    """A name or title chosen by a stranger, as literal text in the card's markdown: no
    link (``[Allow here](https://evil)``, ``<https://evil>``), no character reference, no
    control or bidi character. Channels showing a card's title as plain text
    drop the backslashes again."""
    text = " ".join(_HIDDEN.sub("", text).split())
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", text)


_MARKDOWN_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")


def shown_as_text(text: str) -> str:
    """Markdown's backslash escapes undone, for a card's title, button labels or
    notification text where a channel shows them as they are (not rendered as markdown):
    ``plain``'s escapes of a stranger's name (``\\<``, ``\\[``) would show as backslashes."""
    return _MARKDOWN_ESCAPE.sub(r"\1", text)


_BIDI_SHOWN = re.compile(f"[{_BIDI}]")


def preview(body: str) -> str:
    """The held message verbatim in a code block (markdown in it is not rendered, so link
    titles and reference definitions cannot hide words), bounded, saying what was cut. A
    bidi control is shown as its code point (``<U+202E>``): rendered, it would show the
    words after it reversed, not as the agent reads them."""
    text = _BIDI_SHOWN.sub(lambda m: f"<U+{ord(m.group()):04X}>", body.strip())
    lines = text.splitlines()
    shown = "\n".join(lines[:_PREVIEW_LINES])[:_PREVIEW_CHARS]
    cut = len(text) - len(shown)
    fence = "`" * max(3, _longest_backtick_run(shown) + 1)
    block = f"{fence}\n{shown}\n{fence}"
    if cut > 0:
        block += f"\n(…{cut} more characters not shown here; Allow runs the whole message)"
    return block


def _longest_backtick_run(text: str) -> int:
    return max((len(run) for run in re.findall(r"`+", text)), default=0)


def _buttons(code: str, allow: str, deny: str) -> tuple[Button, ...]:
    return (
        Button(allow, approval_action(code, "allow"), emoji="✅", style="primary"),
        Button(deny, approval_action(code, "deny"), emoji="❌", style="danger"),
    )


def _how_to_decide(code: str, allow: str, deny: str, buttons: bool) -> str:
    if buttons:
        return f"Or reply !approve {code} or !deny {code}."
    return f"Reply `!approve {code}` to {allow}, `!deny {code}` to {deny}."


def pending_card(approval: ApprovalRecord, held: HeldSummary, *, buttons: bool = True) -> Card:
    """The card asking an owner; ``buttons`` False makes the text card of a channel without
    buttons, which says what to reply instead."""
    where = room_label(approval.room_title, approval.room)
    if approval.kind == "room":
        return Card(
            title=f"Invitation to {where}",
            body=(
                f"{plain(approval.sender_name)} ({plain(approval.sender_id)}) invited the bot "
                f"to {where} "
                f"({approval.channel}). Join, or ignore the invitation? "
                + _how_to_decide(approval.code, "join", "ignore", buttons)
            ),
            buttons=_buttons(approval.code, "Join", "Ignore") if buttons else (),
        )
    count = f"{held.total} messages" if held.total != 1 else "a message"
    allow = "Allow" if buttons else "Allowing"
    quotes = "\n\n".join(preview(body) for body in held.shown)
    unseen = held.total - len(held.shown)
    more = (
        f"\n\n…and {unseen} more message{'s' if unseen != 1 else ''} not shown here: "
        f"{allow} will not run them."
        if unseen > 0
        else ""
    )
    runs = "their message" if len(held.shown) == 1 else f"the {len(held.shown)} messages shown"
    return Card(
        title=f"Unknown sender in {where}",
        body=(
            f"{plain(approval.sender_name)} ({plain(approval.sender_id)}) wrote {count} to "
            "the bot in "
            f"{where} ({approval.channel}):\n\n{quotes}{more}\n\n{allow} runs {runs} and lets "
            "them use the bot in this room. "
            + _how_to_decide(approval.code, "allow", "deny", buttons)
        ),
        buttons=_buttons(approval.code, "Allow", "Deny") if buttons else (),
    )


def decided_card(approval: ApprovalRecord, timezone: str, outcome: Outcome | None = None) -> Card:
    where = room_label(approval.room_title, approval.room)
    when = datetime.datetime.fromtimestamp(approval.decided_at or time.time(), ZoneInfo(timezone))
    at = f"{when:%Y-%m-%d %H:%M} {timezone}"
    if approval.state is ApprovalState.EXPIRED:
        outcome_text = f"Expired at {at}; the held messages were dropped."
    elif approval.kind == "room":
        verb = "Joined" if approval.state is ApprovalState.ALLOWED else "Ignored"
        outcome_text = f"{verb} by {approval.decided_by} at {at}."
    else:
        verb = "Allowed" if approval.state is ApprovalState.ALLOWED else "Denied"
        outcome_text = f"{verb} by {approval.decided_by} at {at}."
        if outcome is not None and approval.state is ApprovalState.ALLOWED:
            outcome_text += f" Ran {outcome.ran} message{'s' if outcome.ran != 1 else ''}"
            if outcome.dropped_unseen:
                outcome_text += f"; dropped {outcome.dropped_unseen} not shown on this card"
            outcome_text += "."
    return Card(
        title=f"{plain(approval.sender_name)} in {where}",
        body=f"{plain(approval.sender_name)} ({plain(approval.sender_id)}) in {where}: "
        f"{outcome_text}",
        buttons=(),
    )
