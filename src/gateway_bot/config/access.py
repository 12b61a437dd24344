"""Who may decide, where approval cards go, and each room's sender and engage policies.

Identities are per channel (a Matrix MXID, a Slack user id, an email address): the same
person has one per channel, and a decision counts only from the identity on the channel the
decision came from.
"""

from __future__ import annotations

import enum
import re
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

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
    timezone: str | None = Field(
        default=None, description="IANA zone of /schedule here; unset: access.timezone."
    )

    @field_validator("timezone")
    @classmethod
    def _room_zone(cls, value: str | None) -> str | None:
        return known_zone(value)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from exc
        return value


def known_zone(value: str | None) -> str | None:
    if value is not None:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r} (an IANA name: Europe/Berlin)") from None
    return value


class ScheduleLimits(Section):
    """What /schedule allows (decision 0068)."""

    max_per_conversation: PositiveInt = 20
    min_interval_minutes: PositiveFloat = 5.0
    catch_up_minutes: PositiveFloat = Field(
        default=60.0,
        description="A run missed while the daemon was down runs at start if at most this "
        "late; later ones are skipped with a note in the conversation.",
    )


class Identity(Section):
    """One person's accounts on several channels, as the owner vouches for them: what lets
    ``/mail`` continue a chat conversation by mail (the reply must come, DMARC-authenticated,
    from ``email`` of the identity that asked)."""

    name: str = Field(default="", description="Who this is (for logs and answers).")
    matrix: str | None = Field(default=None, description="Matrix user id (@alice:example.org).")
    slack: str | None = Field(default=None, description="Slack user id (U0123ABCD).")
    console: str | None = Field(default=None, description="Console sender (console:USER).")
    email: str | None = Field(default=None, description="Email address (alice@example.org).")

    @field_validator("email")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is None:
            return None
        local, at, domain = value.strip().rpartition("@")
        if not at or not local or "." not in domain or any(c.isspace() for c in value.strip()):
            raise ValueError(f"not an email address: {value!r}")
        return f"{local}@{domain}".lower()

    def on(self, channel: str) -> str | None:
        """This person's id on ``channel`` (a channel's name), None when not mapped there."""
        found = getattr(self, channel, None) if channel in _IDENTITY_CHANNELS else None
        return found if isinstance(found, str) else None

    def is_on(self, channel: str, sender_id: str) -> bool:
        """``sender_id`` (as the channel authenticated it) is this person on ``channel``.
        Email addresses compare case-insensitively (the channel lowercases its senders)."""
        mine = self.on(channel)
        if mine is None:
            return False
        return mine == sender_id.lower() if channel == "email" else mine == sender_id


_IDENTITY_CHANNELS = ("matrix", "slack", "console", "email")


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
    timezone: str | None = Field(
        default=None, description="IANA zone of /schedule where a room sets none; unset: UTC."
    )
    schedules: ScheduleLimits = Field(default_factory=ScheduleLimits)
    identities: list[Identity] = Field(
        default_factory=list,
        description="People and their ids per channel: /mail sends a chat conversation's "
        "latest reply to the sender's email and a reply to it continues the conversation.",
    )

    @field_validator("identities")
    @classmethod
    def _one_person_per_id(cls, value: list[Identity]) -> list[Identity]:
        for channel in _IDENTITY_CHANNELS:
            ids = [i.on(channel) for i in value if i.on(channel) is not None]
            if len(ids) != len(set(ids)):
                raise ValueError(f"the same {channel} id is in more than one identity")
        return value

    def identity_of(self, channel: str, sender_id: str) -> Identity | None:
        """The mapped person who is ``sender_id`` on ``channel``; None for everyone else."""
        return next((i for i in self.identities if i.is_on(channel, sender_id)), None)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        return known_zone(value)

    def room_settings(self, channel: str, room: str) -> RoomSettings:
        for settings in self.rooms:
            if settings.channel not in (None, channel):
                continue
            if settings.match in ("*", room):
                return settings
        return RoomSettings()

    def may_decide(self, channel: str, identity: str) -> bool:
        return identity in self.owners.get(channel, ()) or identity in self.admins.get(channel, ())

    def decides_somewhere(self, identity: str) -> bool:
        """Is ``identity`` an owner or admin on any channel: someone who may be told whether
        an approval code exists (everyone else gets one answer either way)."""
        return any(identity in names for names in (*self.owners.values(), *self.admins.values()))
