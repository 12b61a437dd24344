"""Who may decide, where approval cards go, and each room's sender and engage policies.

Identities are per channel (a Matrix MXID, a Slack user id, an email address): the same
person has one per channel, and a decision counts only from the identity on the channel the
decision came from.
"""

from __future__ import annotations

import enum
import re
from typing import Any

from pydantic import Field, PositiveFloat, PositiveInt, field_validator

from gateway_bot.config.section import Section


class SenderPolicy(enum.Enum):
    STRICT = "strict"
    """Unknown senders are dropped and logged."""
    REQUEST_APPROVAL = "request_approval"
    """Unknown senders' messages are held and the owner gets an Allow/Deny card."""
    PUBLIC = "public"
    """Anyone the channel authenticated may use the bot."""


class EngageMode(enum.Enum):
    MENTION = "mention"
    PATTERN = "pattern"
    MENTION_STICKY = "mention-sticky"
    """After one mention in a thread (conversation), the rest of it engages."""


class IgnoredMessages(enum.Enum):
    DROP = "drop"
    ACCUMULATE = "accumulate"
    """Kept; the last N are handed to the agent with the next engaging message."""


class ApprovalDestination(Section):
    channel: str = Field(description="Channel name the cards go to (matrix, slack...).")
    context: dict[str, Any] = Field(
        description="Where in that channel, as the channel addresses a reply "
        "(Matrix: {room_id: ...}; Slack: {channel: ...})."
    )


class RoomSettings(Section):
    match: str = Field(default="*", description="A room id (as the channel names it) or *.")
    channel: str | None = Field(default=None, description="Only rooms of this channel.")
    sender_policy: SenderPolicy = SenderPolicy.REQUEST_APPROVAL
    engage: EngageMode | None = Field(
        default=None, description="Unset: every message in DMs, mentions in group rooms."
    )
    pattern: str = "."
    ignored: IgnoredMessages = IgnoredMessages.DROP
    context_size: PositiveInt = 10

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from exc
        return value


class AccessSettings(Section):
    owners: dict[str, list[str]] = Field(
        default_factory=dict, description="Per channel: identities that own this deployment."
    )
    admins: dict[str, list[str]] = Field(
        default_factory=dict, description="Per channel: identities that may also decide."
    )
    approval_destination: ApprovalDestination | None = None
    approval_expiry_hours: PositiveFloat = 24.0
    rooms: list[RoomSettings] = Field(
        default_factory=list, description="First match wins; unmatched rooms get defaults."
    )

    def room_settings(self, channel: str, room: str) -> RoomSettings:
        for settings in self.rooms:
            if settings.channel not in (None, channel):
                continue
            if settings.match in ("*", room):
                return settings
        return RoomSettings()

    def may_decide(self, channel: str, identity: str) -> bool:
        return identity in self.owners.get(channel, ()) or identity in self.admins.get(channel, ())
