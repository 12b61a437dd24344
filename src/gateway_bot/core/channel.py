"""The boundary every channel implements; the core talks to channels only through it.

Why protocols rather than a base class: channels live in their own packages, and the core
must never import them (checked by import-linter). A channel is anything with these methods.

``ChannelAdapter`` is the small core every channel has: listen, authenticate and parse, send
a reply, send a notice. What only some channels can do is an optional protocol of its own,
which the core checks for with ``isinstance`` (the capability, never the channel's name) and
falls back from when it is missing:

- ``ProgressDisplay``: an acknowledgement turned into live progress. Without it: no
  acknowledgement and no progress; the reply is the only answer.
- ``Acknowledges``: a one-off "working on it" for a channel that cannot edit it into live
  progress (mail). Without it and without ``ProgressDisplay``: no acknowledgement.
- ``CardButtons``: approval cards with buttons, edited when decided. Without it: the card is
  a text notice (``send_rejection``) telling owners to reply ``!approve CODE`` /
  ``!deny CODE``, which the shared commands decide, owners only, as a press would.
- ``RoomInvitations``: joining and leaving rooms. Without it: invitations are not offered
  to owners; they end as rejected.
- ``AttachmentDownloads``: files sent with a message, into the conversation's inbox.
  Without it: no file is fetched and the agent's prompt says which were attached.
- ``ConversationMail``: a mail thread opened for a conversation of another channel (``/mail``,
  ``core/commands/mail.py``), whose authenticated replies continue that conversation.
  Without any: ``/mail`` says no channel can send mail.
- ``SenderRecheck``: whether a sender its channel admitted once is admitted still (allowed
  users, membership, a deleted account), asked before a scheduled run, which replays a
  message parsed when the schedule was made. Without it: the verdict stored then stands.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gateway_bot.core.workspaces.inbox_files import InboxWriter
from gateway_bot.domain.messages import (
    Card,
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
    """What every channel does; everything else is an optional protocol below."""

    @property
    def name(self) -> str:
        """Unique channel name ("console", "matrix"...), used as a key in the store."""
        ...

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

    async def send_reply(self, context: JsonDict, task_id: str, reply: Reply) -> None:
        """Send the final reply. After a crash the same reply may be sent again with the same
        task id: channels whose protocol has idempotent sends (Matrix txn ids) use it."""
        ...

    async def send_rejection(self, context: JsonDict, text: str) -> None:
        """Send a notice (markdown) that is not a task's reply: a refusal, a full queue, and
        on channels without ``CardButtons`` the approval cards themselves."""
        ...


@runtime_checkable
class ProgressDisplay(Protocol):
    """An acknowledgement that becomes the task's live progress display.

    The core keeps the steps and passes them in every ``Progress`` (the closing one, with
    ``outcome`` set, after the reply is out): a display caches nothing of its own."""

    @property
    def progress_interval_s(self) -> float:
        """Minimum time between two progress updates sent to this channel."""
        ...

    async def send_acknowledgement(self, context: JsonDict, task_id: str, text: str) -> None:
        """Tell the sender their message was picked up; channels that can edit keep this
        message (by task id) and turn it into the progress display."""
        ...

    async def send_progress(self, context: JsonDict, progress: Progress) -> None:
        """Show ``progress``; close the display when ``progress.outcome`` is set (a display
        this channel never opened for that task is left alone)."""
        ...


@runtime_checkable
class PreparesAcknowledgement(Protocol):
    """An acknowledgement that writes a record of its own before it is sent (Slack: the
    post's exactly-once intent). ``Scheduler.queue`` calls this while the message's flush
    runs, so that write does not come between the flush and the acknowledgement (decision 0104).
    It sends nothing, and the acknowledgement may never follow (the conversation was full,
    the daemon was killed): what it writes must be harmless then."""

    async def prepare_acknowledgement(self, context: JsonDict, task_id: str) -> None: ...


@runtime_checkable
class Acknowledges(Protocol):
    """A one-off acknowledgement, for channels whose messages cannot be edited into progress.

    Sent when the task is queued (after routing: a held stranger's mail is not acknowledged
    until an owner allows it), with the core's text, which carries the conversation's
    dashboard link when ``dashboard.public_url`` is set. The channel may decline (its own
    setting says whether people want these)."""

    async def acknowledge(self, context: JsonDict, task_id: str, text: str) -> None: ...


@runtime_checkable
class CardButtons(Protocol):
    """Cards with buttons (or reactions standing for them) that parse back to Decisions."""

    async def send_card(self, context: JsonDict, card: Card) -> str:
        """Send a card with buttons; return a channel reference to edit it later."""
        ...

    async def update_card(self, context: JsonDict, card_ref: str, card: Card) -> None:
        """Replace a sent card (e.g. "Allowed by X at T", without buttons)."""
        ...


@runtime_checkable
class RoomInvitations(Protocol):
    """A channel whose bot is invited into rooms and can accept or decline."""

    async def join_room(self, room: str) -> None:
        """Accept an invitation (a RoomInvite's room)."""
        ...

    async def leave_room(self, room: str) -> None:
        """Decline an invitation or leave."""
        ...


@runtime_checkable
class SenderRecheck(Protocol):
    """A channel that can say again whether a stored message's sender is allowed now.

    A schedule's runs replay the message that made it, with the ``sender_allowed`` its
    channel decided then; the owner may have removed that person from the allowed users
    since, or they may have left the room. Raise a transient error (the retry policy's)
    when the channel cannot tell right now; answer False when it can and they are not."""

    async def still_allowed(self, message: InboundMessage) -> bool: ...


@runtime_checkable
class AttachmentDownloads(Protocol):
    """A channel that can fetch the files sent with a message."""

    async def save_attachments(self, message: InboundMessage, inbox: InboxWriter) -> list[str]:
        """Download the message's attachments through ``inbox`` (the only way into the
        conversation's inbox: the agent can plant links there); return the saved names."""
        ...


class NoAttachmentDownloads:
    """The fallback for a channel without ``AttachmentDownloads``: nothing is fetched, so
    the prompt lists the files as attached but not delivered (``core/conversations/prompts.py``)."""

    async def save_attachments(self, message: InboundMessage, inbox: InboxWriter) -> list[str]:
        return []


def attachment_downloads(adapter: ChannelAdapter) -> AttachmentDownloads:
    """The channel's own downloads, or the fallback that fetches nothing."""
    return adapter if isinstance(adapter, AttachmentDownloads) else NoAttachmentDownloads()


@dataclass(frozen=True)
class MailRequest:
    """What ``/mail`` asks a mail channel to send: a chat conversation's latest reply, to the
    asking person's mapped address, opening a thread that belongs to that conversation."""

    conversation_id: str
    """The chat conversation the thread continues (and its ``[ID:...]`` tag)."""
    address: str
    """The asking identity's email address: the only sender whose replies continue it."""
    subject: str
    text: str
    """Markdown: a line of introduction and the reply."""
    files: tuple[str, ...]
    """Host paths (the reply's files, in its task's ``sent/``)."""
    send_key: str
    """Names this send for exactly-once: the same key after a crash never mails twice."""


@runtime_checkable
class ConversationMail(Protocol):
    """A channel that can continue another channel's conversation by mail.

    Its part of the bargain: a mail it parses that answers such a thread, from the address
    the thread was opened for and authenticated (DMARC), carries
    ``InboundMessage.continues_conversation``; anyone else's mail into that thread does
    not, and is a new sender there. The core checks the claim again against
    ``access.identities`` before the message joins the conversation."""

    async def mail_conversation(self, request: MailRequest) -> str:
        """Send once per ``request.send_key`` (an intent recorded before SMTP, as a reply's);
        return the subject it went out with."""
        ...


@runtime_checkable
class SendsWhereItListens(Protocol):
    """A channel that can send only from the process whose listener runs: its session
    (Matrix's login, made by the listener, and its device's crypto state) lives there.
    Under replicas (``core/replicas/duties.py``) its conversations run only on the replica that
    holds its listener's lease. Channels that send with their configured credentials alone
    (Slack's Web API, SMTP) leave it out, and their tasks run on any replica."""

    sends_where_it_listens: bool
