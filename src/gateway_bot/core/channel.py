"""The boundary every channel implements; the core talks to channels only through it.

Why protocols rather than a base class: channels live in their own packages, and the core
must never import them (checked by import-linter). A channel is anything with these methods.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from gateway_bot.core.inbox_files import InboxWriter
from gateway_bot.domain.messages import (
    Card,
    ChannelCapabilities,
    ChannelStatus,
    Decision,
    InboundMessage,
    JsonDict,
    Progress,
    RawMessage,
    Reply,
    RoomInvite,
)


class AuthenticationError(Exception):
    """A message was refused by its channel's authentication or authorization.

    Carries the sender and a human reason so the core can record the refusal without
    knowing anything about the protocol. ``unauthorized`` distinguishes "we know who this
    is and they may not" from "we could not verify who this is".
    """

    def __init__(self, sender: str, reason: str, *, unauthorized: bool = False) -> None:
        super().__init__(f"{sender}: {reason}")
        self.sender = sender
        self.reason = reason
        self.unauthorized = unauthorized


SubmitResult = bool
"""True when the message is durably stored (new or a duplicate): the channel may ack it."""

Submit = Callable[[RawMessage], Awaitable[SubmitResult]]


class ChannelListener(Protocol):
    """Hears messages on a channel and hands each to ``submit``.

    ``start`` returns once listening has begun; the listener runs its own asyncio tasks,
    reconnects by itself and reports its health through ``status``. A listener acknowledges a
    message at its source only after ``submit`` returned True.
    """

    async def start(self, submit: Submit) -> None: ...

    async def stop(self) -> None: ...

    @property
    def status(self) -> ChannelStatus: ...


class ChannelAdapter(Protocol):
    """Everything the core may ask of one channel."""

    @property
    def name(self) -> str:
        """Unique channel name ("console", "matrix"...), used as a key in the store."""
        ...

    @property
    def capabilities(self) -> ChannelCapabilities: ...

    @property
    def listener(self) -> ChannelListener: ...

    async def authenticate_and_parse(
        self, raw: RawMessage
    ) -> InboundMessage | Decision | RoomInvite | None:
        """Verify the sender and parse; raise AuthenticationError to refuse.

        A button press or an approval reaction parses to a Decision; an invitation into a
        room to a RoomInvite; None means there is nothing to act on (a reaction on a card
        already decided, an edit) and is not a refusal. Make one attempt: a transport
        failure (``core/retries.is_transient``) is retried by the core, any other exception
        rejects the message as unparseable."""
        ...

    async def save_attachments(self, message: InboundMessage, inbox: InboxWriter) -> list[str]:
        """Download the message's attachments through ``inbox`` (the only way into the
        conversation's inbox: the agent can plant links there); return the saved names."""
        ...

    async def send_acknowledgement(self, context: JsonDict, task_id: str, text: str) -> None:
        """Tell the sender their message was picked up. Channels that can edit keep this
        message (by task id) and turn it into the live progress display."""
        ...

    async def send_progress(self, context: JsonDict, progress: Progress) -> None: ...

    async def send_reply(self, context: JsonDict, task_id: str, reply: Reply) -> None:
        """Send the final reply. After a crash the same reply may be sent again with the same
        task id: channels whose protocol has idempotent sends (Matrix txn ids) use it."""
        ...

    async def send_rejection(self, context: JsonDict, text: str) -> None: ...

    async def send_card(self, context: JsonDict, card: Card) -> str:
        """Send a card with buttons; return a channel reference to edit it later."""
        ...

    async def update_card(self, context: JsonDict, card_ref: str, card: Card) -> None:
        """Replace a sent card (e.g. "Allowed by X at T", without buttons)."""
        ...

    async def join_room(self, room: str) -> None:
        """Accept an invitation (a RoomInvite's room)."""
        ...

    async def leave_room(self, room: str) -> None:
        """Decline an invitation or leave."""
        ...
