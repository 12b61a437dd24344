"""Pure rules over Slack event payloads: which events are people talking, which of them engage
the bot, how a message is named and threaded, and how Slack's text markup reads as plain text.

No I/O here, so every rule is tested on plain dicts.

Engagement (what the listener submits), kept deliberately simple until the core's engage
modes decide instead:

* only messages people typed count: plain messages, file shares and thread broadcasts.
  Edits (``message_changed``), deletions, joins, bot posts and anything with ``edited``
  never start a task;
* in a DM (and the assistant pane) every message engages;
* in a channel, a message that mentions the bot engages (``app_mention``, or ``<@BOT>`` in
  the text), and so does any reply in a thread the bot already takes part in;
* ``listen: all`` submits every message people type where the bot is, with the facts
  (``mentioned``, ``is_direct``) set, for a core that decides itself.
"""

from __future__ import annotations

import html
import re
from typing import Any

JsonDict = dict[str, Any]

_HUMAN_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
_MESSAGE_TYPES = frozenset({"message", "app_mention"})


_KEPT_FROM_SELF = frozenset({"member_joined_channel", "member_left_channel"})


def is_own(event: JsonDict, bot_user_id: str, bot_id: str) -> bool:
    """An event the bot caused itself (its own posts), which Bolt's ``IgnoringSelfEvents``
    drops, joins and leaves excepted: the same rule for events that skip Bolt (Socket
    Mode, ``listener._on_event_callback``)."""
    user = event.get("user")
    return (
        (bool(bot_user_id) and user == bot_user_id)
        or (bool(bot_id) and event.get("bot_id") == bot_id)
    ) and event.get("type") not in _KEPT_FROM_SELF


def is_person_talking(event: JsonDict) -> bool:
    """A message a person typed (or a file they shared), not an edit, deletion or bot post."""
    return (
        event.get("type") in _MESSAGE_TYPES
        and event.get("subtype") in _HUMAN_SUBTYPES
        and not event.get("bot_id")
        and not event.get("hidden")
        and "edited" not in event
        and isinstance(event.get("user"), str)
        and _is_ts(event.get("ts"))
        and (event.get("thread_ts") is None or _is_ts(event.get("thread_ts")))
        and isinstance(event.get("channel"), str)
    )


_TS = re.compile(r"[0-9]{1,12}\.[0-9]{1,9}")


def _is_ts(value: object) -> bool:
    """A Slack timestamp (``1700000000.000100``): it names threads and becomes part of
    conversation keys, so anything else is not a message Slack sent."""
    return isinstance(value, str) and _TS.fullmatch(value) is not None


def is_bot_added(event: JsonDict, bot_user_id: str) -> bool:
    """Someone added the bot to a channel. Slack has no pending invitation for apps: the
    bot is a member already, and the core's answer is to stay or to leave."""
    return (
        event.get("type") == "member_joined_channel"
        and bool(bot_user_id)
        and event.get("user") == bot_user_id
        and isinstance(event.get("channel"), str)
    )


def is_direct(event: JsonDict) -> bool:
    """A one-to-one DM with the bot (``im``; app_mention events omit channel_type)."""
    channel_type = event.get("channel_type")
    if channel_type is not None:
        return bool(channel_type == "im")
    return str(event.get("channel", "")).startswith("D")


def mentions_bot(event: JsonDict, bot_user_id: str) -> bool:
    if event.get("type") == "app_mention":
        return True
    return bool(bot_user_id) and f"<@{bot_user_id}>" in str(event.get("text", ""))


def thread_root(event: JsonDict) -> str:
    """The ts naming the event's thread: its parent's, or its own for a top-level message."""
    return str(event.get("thread_ts") or event["ts"])


def is_thread_reply(event: JsonDict) -> bool:
    return bool(event.get("thread_ts")) and event.get("thread_ts") != event.get("ts")


def should_submit(
    event: JsonDict, bot_user_id: str, bot_in_thread: bool, *, listen_all: bool
) -> bool:
    """Does this event go to the core at all (see the module docstring)?"""
    if not is_person_talking(event):
        return False
    if listen_all or is_direct(event) or mentions_bot(event, bot_user_id):
        return True
    return is_thread_reply(event) and bot_in_thread


def message_id(team_id: str, event: JsonDict) -> str:
    """Stable over retries and over the two events (message, app_mention) one post makes."""
    return f"{team_id}:{event['channel']}:{event['ts']}"


def conversation_key(team_id: str, event: JsonDict) -> str:
    return f"{team_id}:{event['channel']}:{thread_root(event)}"


def click_problem(body: JsonDict) -> str | None:
    """Why a ``block_actions`` payload is not a click this module can read, or None.

    Checked before anything reads it: a field of the wrong type would raise in the
    listener, Bolt would answer 500, the envelope would stay unacknowledged and Slack would
    deliver it again, failing the same way, for ever."""
    for key in ("user", "team", "container"):
        if not isinstance(body.get(key), dict):
            return f"its {key!r} is not an object"
    if not isinstance(body["user"].get("id"), str):
        return "its user has no id"
    actions = body.get("actions")
    if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        return "it has no action"
    return None


def action_message_id(body: JsonDict) -> str:
    """A button press: the same click redelivered keeps its id, a second click does not.
    ``body`` passed ``click_problem``."""
    team = str(body["team"].get("id", ""))
    user = str(body["user"]["id"])
    action = body["actions"][0]
    container = body["container"]
    where = f"{container.get('channel_id', '')}:{container.get('message_ts', '')}"
    return (
        f"{team}:action:{where}:{user}:{action.get('action_id', '')}:{action.get('action_ts', '')}"
    )


def click_place(body: JsonDict) -> JsonDict:
    """Where a click happened (channel, thread), to tell the clicker something there."""
    container = body.get("container")
    message = body.get("message")
    if not isinstance(container, dict):
        return {}
    thread = container.get("thread_ts") or (
        message.get("thread_ts") if isinstance(message, dict) else None
    )
    place: JsonDict = {"channel": str(container.get("channel_id") or "")}
    if _is_ts(thread):
        place["thread_ts"] = thread
    return place


_LINK = re.compile(r"<([^<>|]+)(?:\|([^<>]*))?>")


def strip_bot_mention(text: str, bot_user_id: str) -> str:
    """The message without the bot's mention: ``<@BOT> fix the tests`` -> ``fix the tests``.
    Line breaks stay (code blocks pasted after a mention keep their shape)."""
    mention = f"<@{bot_user_id}>" if bot_user_id else None
    lines = []
    for line in text.split("\n"):
        if mention is not None and mention in line:
            line = re.sub(r"[ \t]{2,}", " ", line.replace(mention, " ")).strip()
        lines.append(line)
    return "\n".join(lines).strip()


def slack_text_to_plain(text: str) -> str:
    """Slack's markup as a person reads it: ``<https://x|label>`` -> ``label (https://x)``,
    ``<#C1|general>`` -> ``#general``, ``<@U1>`` -> ``@U1``, ``<!here>`` -> ``@here``, and
    the ``&amp; &lt; &gt;`` escapes undone (last, so they cannot forge markup). The result
    is for the agent: an escaped ``&lt;!here&gt;`` comes out as ``<!here>``, so anything
    posted back to Slack goes through ``render.escape`` / ``render.to_mrkdwn``."""

    def plain(match: re.Match[str]) -> str:
        target, label = match.group(1), match.group(2)
        if target.startswith("#"):
            return f"#{label}" if label else target
        if target.startswith("@"):
            return f"@{label}" if label else target
        if target.startswith("!"):
            name = target[1:].split("^", 1)[0]
            return f"@{label or name}"
        if label and label != target:
            return f"{label} ({target})"
        return target

    return html.unescape(_LINK.sub(plain, text))
