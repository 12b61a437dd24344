"""Matrix protocol logic as pure functions over event JSON, testable without a server.

Which timeline events are new to the bot, what kind each is, what a message says (body,
thread, files, mentions), which conversation it belongs to, and who is allowed. The
listener and the adapter do the I/O around these.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gateway_bot.domain.messages import Attachment

JsonDict = dict[str, Any]

CARD_KEY = "org.gateway_bot.card"
"""Where a card event keeps its buttons: {"buttons": [{"action_id", "emoji", "label"}]}."""

FILE_MSGTYPES = frozenset({"m.file", "m.image", "m.audio", "m.video"})


class EventKind(enum.Enum):
    MESSAGE = "message"
    REACTION = "reaction"
    ENCRYPTED = "encrypted"
    IGNORED = "ignored"


def user_allowed(user_id: str, patterns: Iterable[str]) -> bool:
    """``@user:server`` matches itself; ``@*:server`` matches every user of that server."""
    _, _, server = user_id.partition(":")
    for pattern in patterns:
        if pattern == user_id:
            return True
        if pattern.startswith("@*:") and server and pattern[3:] == server:
            return True
    return False


def _relation(content: JsonDict) -> JsonDict:
    relates = content.get("m.relates_to")
    return relates if isinstance(relates, dict) else {}


def _is_own_join(event: JsonDict, bot_user_id: str) -> bool:
    return (
        event.get("type") == "m.room.member"
        and event.get("state_key") == bot_user_id
        and (event.get("content") or {}).get("membership") == "join"
    )


def new_timeline_events(
    events: Sequence[JsonDict], bot_user_id: str, *, joined_before: bool
) -> list[JsonDict]:
    """The events the bot should act on. In a room it was already in, all of them; in a
    room it joined within this batch, only those after its own join: history from before
    the bot arrived is context for humans, never a task."""
    if joined_before:
        return list(events)
    joins = [i for i, event in enumerate(events) if _is_own_join(event, bot_user_id)]
    return list(events[joins[-1] + 1 :]) if joins else []


def classify(event: JsonDict, bot_user_id: str) -> EventKind:
    """What the listener does with an event. Its own events, notices (how bots talk, so two
    bots never answer each other), edits and redacted messages are ignored."""
    if event.get("sender") == bot_user_id:
        return EventKind.IGNORED
    kind = event.get("type")
    content = event.get("content") or {}
    if kind == "m.room.encrypted":
        return EventKind.ENCRYPTED
    if kind == "m.reaction":
        relation = _relation(content)
        if relation.get("rel_type") == "m.annotation" and relation.get("event_id"):
            return EventKind.REACTION
        return EventKind.IGNORED
    if kind != "m.room.message" or not content.get("msgtype"):
        return EventKind.IGNORED
    if content.get("msgtype") == "m.notice":
        return EventKind.IGNORED
    if _relation(content).get("rel_type") == "m.replace":
        return EventKind.IGNORED
    return EventKind.MESSAGE


@dataclass(frozen=True)
class ParsedMessage:
    body: str
    thread_root: str | None
    attachments: tuple[Attachment, ...]


def thread_root_of(content: JsonDict) -> str | None:
    relation = _relation(content)
    if relation.get("rel_type") == "m.thread" and relation.get("event_id"):
        return str(relation["event_id"])
    return None


_FALLBACK_LINE = re.compile(r"^> ?.*$")


def strip_reply_fallback(body: str) -> str:
    """Drop the ``> <@user> quoted`` lines older clients put before a reply's text."""
    lines = body.split("\n")
    if not lines or not lines[0].startswith("> <"):
        return body
    index = 0
    while index < len(lines) and _FALLBACK_LINE.match(lines[index]):
        index += 1
    return "\n".join(lines[index:]).lstrip("\n")


def parse_message(event: JsonDict) -> ParsedMessage:
    """Body, thread and attachments of an ``m.room.message``. A file's ``body`` is its
    caption when a separate ``filename`` is given (Matrix 1.10), else just its name."""
    content = event.get("content") or {}
    body = str(content.get("body") or "")
    msgtype = content.get("msgtype")
    if not isinstance(msgtype, str):  # a list would not even hash: read as unknown text
        msgtype = "m.text"
    attachments: tuple[Attachment, ...] = ()
    encrypted_file = content.get("file")
    if msgtype in FILE_MSGTYPES and isinstance(encrypted_file, dict):
        # An encrypted attachment: the reference carries its key (see files.py).
        content = {**content, "url": json.dumps(encrypted_file, sort_keys=True)}
    if msgtype in FILE_MSGTYPES and isinstance(content.get("url"), str):
        raw_info = content.get("info")
        info: JsonDict = raw_info if isinstance(raw_info, dict) else {}
        filename = str(content.get("filename") or body or "file")
        size = info.get("size")
        attachments = (
            Attachment(
                filename=filename,
                content_type=str(info.get("mimetype") or "application/octet-stream"),
                size=size if isinstance(size, int) and size >= 0 else 0,
                source_ref=str(content["url"]),
            ),
        )
        body = body if content.get("filename") and body != filename else ""
    elif _relation(content).get("m.in_reply_to"):
        body = strip_reply_fallback(body)
    if msgtype == "m.emote":
        body = f"* {body}"
    return ParsedMessage(body, thread_root_of(content), attachments)


def conversation_of(
    room_id: str, event_id: str, thread_root: str | None, threads: bool
) -> tuple[str, str | None]:
    """(conversation key, thread the bot answers in). With threads on, every thread is a
    conversation and a top-level message starts one rooted at itself; with threads off the
    room is one conversation, though a message written in a thread is answered there."""
    if threads:
        root = thread_root or event_id
        return f"{room_id}|{root}", root
    return room_id, thread_root


def mentions_bot(content: JsonDict, bot_user_id: str, bot_names: Iterable[str]) -> bool:
    mentions = content.get("m.mentions")
    user_ids = mentions.get("user_ids") if isinstance(mentions, dict) else None
    if isinstance(user_ids, list) and bot_user_id in user_ids:
        return True
    text = f"{content.get('body') or ''}\n{content.get('formatted_body') or ''}"
    if bot_user_id in text or f"matrix.to/#/{bot_user_id}" in text:
        return True
    return any(_word(name).search(text) for name in bot_names if name)


def _word(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w@]){re.escape(name)}(?!\w)", re.IGNORECASE)


def strip_leading_mention(body: str, bot_user_id: str, bot_names: Iterable[str]) -> str:
    """``bot: /stop`` and ``@bot:server /stop`` become ``/stop``, so commands work when the
    room needs a mention to reach the bot."""
    for name in (bot_user_id, *bot_names):
        if not name:
            continue
        match = re.match(rf"^@?{re.escape(name)}\s*[:,]?\s+", body, re.IGNORECASE)
        if match:
            return body[match.end() :]
    return body


def reaction_of(event: JsonDict) -> tuple[str, str] | None:
    """(reacted-to event id, key) of an ``m.annotation`` reaction."""
    relation = _relation(event.get("content") or {})
    if relation.get("rel_type") != "m.annotation":
        return None
    target, key = relation.get("event_id"), relation.get("key")
    if not isinstance(target, str) or not isinstance(key, str):
        return None
    return target, key


def card_buttons(event: JsonDict) -> list[JsonDict]:
    """The buttons a card shows now: those of its latest edit (bundled by the homeserver
    under ``unsigned.m.relations.m.replace``) if it was edited, else its own. An edit by
    anyone but the card's sender is no edit (the spec has clients check it; Synapse
    bundles only the sender's own, other homeservers need not): a stranger's "edit" of a
    card must not point its buttons at another approval."""
    content = event.get("content") or {}
    relations = (event.get("unsigned") or {}).get("m.relations") or {}
    latest_edit = relations.get("m.replace") if isinstance(relations, dict) else None
    if isinstance(latest_edit, dict) and latest_edit.get("sender") == event.get("sender"):
        new_content = (latest_edit.get("content") or {}).get("m.new_content")
        if isinstance(new_content, dict):
            content = new_content
    card = content.get(CARD_KEY)
    if not isinstance(card, dict):
        return []
    return [b for b in card.get("buttons") or () if isinstance(b, dict)]


def invite_of(invite_state: Sequence[JsonDict], bot_user_id: str) -> tuple[str, bool] | None:
    """(inviter, is_direct) from an invited room's stripped state."""
    for event in invite_state:
        content = event.get("content") or {}
        if (
            event.get("type") == "m.room.member"
            and event.get("state_key") == bot_user_id
            and content.get("membership") == "invite"
        ):
            return str(event.get("sender", "")), bool(content.get("is_direct"))
    return None


def invite_details(invite_state: Sequence[JsonDict], inviter: str) -> JsonDict:
    """The room's name and the inviter's display name, as far as the invite shows them."""
    title, name = "", inviter
    for event in invite_state:
        content = event.get("content") or {}
        if event.get("type") == "m.room.name" and content.get("name"):
            title = str(content["name"])
        if event.get("type") == "m.room.member" and event.get("state_key") == inviter:
            name = str(content.get("displayname") or inviter)
    return {"inviter": inviter, "inviter_name": name, "room_title": title}
