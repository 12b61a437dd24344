"""Does this message engage the agent? A pure function of the message and the room's rules.

Defaults follow what people expect of a bot in chat: in a one-to-one conversation every
message is for the bot; in a group room only messages that mention it are.
"""

from __future__ import annotations

import re
import unicodedata

from gateway_bot.config.access import EngageMode, RoomSettings
from gateway_bot.domain.messages import InboundMessage


def engages(message: InboundMessage, room: RoomSettings, conversation_started: bool) -> bool:
    """``conversation_started``: this conversation (thread) already engaged the bot once,
    which is what makes ``mention-sticky`` sticky."""
    mode = room.engage
    if mode is None:
        return message.is_direct or message.mentioned or not message.room
    if mode is EngageMode.PATTERN:
        return re.search(room.pattern, message.body) is not None
    if mode is EngageMode.MENTION_STICKY:
        return message.is_direct or message.mentioned or conversation_started
    return message.mentioned


def is_blank(text: str) -> bool:
    """Nothing a person could read: only whitespace and format characters (Unicode category
    Cf: zero-width space and joiners, direction marks, the byte order mark, soft hyphens).
    Chat clients leave such characters behind a mention; the agent must not run on them."""
    return all(ch.isspace() or unicodedata.category(ch) == "Cf" for ch in text)
