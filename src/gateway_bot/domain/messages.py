"""Channel-neutral message types: what crosses the boundary between a channel and the core.

Every type here is a frozen dataclass of plain data so that it can be stored in SQLite as
JSON and rebuilt after a restart: a message accepted from a channel must survive a kill -9,
and so must everything the core needs to answer it (the channel context in particular).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

JsonDict = dict[str, Any]


@dataclass(frozen=True)
class RawMessage:
    """What a channel listener heard, before authentication.

    ``payload`` is channel-specific but must be JSON-serialisable: the core stores it as
    is before the channel acknowledges the message at its source, and hands it back to the
    same channel's ``authenticate_and_parse`` (possibly after a restart).
    """

    channel: str
    message_id: str
    """Unique per channel; a second message with the same id is a duplicate delivery."""
    sender: str
    payload: JsonDict
    received_at: float

    def to_json(self) -> JsonDict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RawMessage:
        return cls(
            channel=str(data["channel"]),
            message_id=str(data["message_id"]),
            sender=str(data["sender"]),
            payload=dict(data["payload"]),
            received_at=float(data["received_at"]),
        )


@dataclass(frozen=True)
class Attachment:
    """A file the sender attached; the channel fetches it into the inbox on demand."""

    filename: str
    content_type: str = "application/octet-stream"
    size: int = 0
    source_ref: str = ""
    """Channel-specific handle to fetch the bytes (a URL, an mxc:// URI, a MIME part index)."""


@dataclass(frozen=True)
class InboundMessage:
    """An authenticated, parsed message: the only inbound shape the core understands."""

    channel: str
    message_id: str
    sender_id: str
    sender_name: str
    body: str
    conversation_key: str
    """Names the conversation inside the channel (a room, a thread, an email thread)."""
    received_at: float
    channel_context: JsonDict = field(default_factory=dict)
    """Whatever the channel needs to answer later (room id, thread ts...). JSON only."""
    attachments: tuple[Attachment, ...] = ()
    model_hint: str | None = None
    sender_allowed: bool = True
    """False when the channel verified who the sender is but its allow rules do not admit
    them: the core's approval policy decides (hold and card the owner, drop, or run)."""
    room: str = ""
    """Names where it was said (room id, channel id, mailbox), for policies and cards."""
    room_title: str = ""
    is_direct: bool = False
    """A one-to-one conversation with the bot (DMs engage on every message by default)."""
    mentioned: bool = False
    """The bot was mentioned (by name, MXID, <@U...>)."""
    context: tuple[str, ...] = ()
    """Earlier messages that did not engage the bot, set by the core (accumulate mode)."""
    continues_conversation: str | None = None
    """Set by a mail channel (``core/channel.ConversationMail``) on a reply to mail that
    ``/mail`` sent from a chat conversation, when its authenticated sender is the address it
    went to: that conversation's id. The core checks the claim against
    ``access.identities`` (``core/commands/mail.py``) before honouring it."""

    def to_json(self) -> JsonDict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> InboundMessage:
        fields = dict(data)
        fields["attachments"] = tuple(Attachment(**a) for a in fields.get("attachments", ()))
        fields["context"] = tuple(fields.get("context", ()))
        return cls(**fields)


@dataclass(frozen=True)
class Usage:
    """What a task cost, shown to the user as one line under the reply."""

    cost_usd: float = 0.0
    num_turns: int = 0
    duration_s: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0

    def summary(self) -> str:
        turns = "turn" if self.num_turns == 1 else "turns"
        return f"${self.cost_usd:.4f} · {self.num_turns} {turns} · {self.duration_s:.1f} s"


@dataclass(frozen=True)
class Reply:
    """The answer to one task. ``text`` is markdown; channels render it their way."""

    text: str
    files: tuple[str, ...] = ()
    """Host paths of files from the conversation's outbox to send along."""
    usage: Usage | None = None
    is_error: bool = False
    stopped: bool = False
    """The task was stopped before it finished (/stop, a limit): progress displays say so
    instead of "Done"."""

    def to_json(self) -> JsonDict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Reply:
        usage = data.get("usage")
        return cls(
            text=str(data["text"]),
            files=tuple(data.get("files", ())),
            usage=Usage(**usage) if usage else None,
            is_error=bool(data.get("is_error", False)),
            stopped=bool(data.get("stopped", False)),
        )


@dataclass(frozen=True)
class Progress:
    """A task's progress display as the core keeps it: channels cache nothing.

    While the task runs, each update carries the steps so far; the last one, sent once the
    reply is out, carries ``outcome`` and the finished steps, and the display closes on it
    (Done, Stopped, Failed). After a restart the daemon that ran the task took its steps
    with it: that last update then has none.
    """

    task_id: str
    steps: tuple[str, ...]
    """The newest steps (at most ``core/progress.MAX_STEPS``), newest last."""
    elapsed_s: float
    new_steps: int = 0
    """How many at the end of ``steps`` arrived since the previous update: what a display
    that can only append (the console) prints."""
    outcome: Reply | None = None
    """None while the task runs; the reply that went out, on the closing update."""


@dataclass(frozen=True)
class Button:
    label: str
    action_id: str
    """Opaque to the channel: it comes back unchanged in the Decision a press produces."""
    emoji: str = ""
    """For channels without buttons but with reactions (Matrix): the bot pre-reacts with
    this key, and a reaction with it presses the button."""
    style: str = ""
    """"primary" or "danger" (Slack Block Kit styles); empty for the default look."""


@dataclass(frozen=True)
class Decision:
    """Someone pressed a card's button (or reacted, or typed !approve CODE).

    Channels return this from ``authenticate_and_parse`` instead of an InboundMessage; the
    core checks that ``decider_id`` may decide before acting on ``action_id``.
    """

    channel: str
    action_id: str
    decider_id: str
    decider_name: str
    decided_at: float

    def to_json(self) -> JsonDict:
        return asdict(self)


@dataclass(frozen=True)
class RoomInvite:
    """Someone invited the bot into a room (or added it to a channel) it is not in.

    Channels return this from ``authenticate_and_parse``; the core joins at once for an
    owner and cards the owner (Join / Ignore) for anyone else.
    """

    channel: str
    room: str
    room_title: str
    inviter_id: str
    inviter_name: str
    received_at: float


@dataclass(frozen=True)
class Card:
    """A message with buttons (approvals). Channels without buttons render text commands."""

    title: str
    body: str
    buttons: tuple[Button, ...]


class ChannelHealth(enum.Enum):
    STARTING = "starting"
    CONNECTED = "connected"
    DEGRADED = "degraded"
    """Temporarily lost; the channel is retrying by itself."""
    FAILED = "failed"
    """Gave up; needs an operator."""


@dataclass(frozen=True)
class ChannelStatus:
    health: ChannelHealth
    message: str = ""
