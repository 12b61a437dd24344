"""The Matrix channel as the core sees it: authenticate and parse, then answer.

Authentication is membership: a message counts only if its sender is joined to the room now,
as the bot's own sync last said (``members.py``: at the end of the message's batch or a
later one), else as the homeserver says (``joined_members``: before the process's first
sync, while syncs fail, in a room whose whole membership the sync did not give). A joined
member outside ``allowed_users`` parses with ``sender_allowed=False`` and the core's
approval policy decides. A reaction that presses a card's button parses to a Decision;
the card's buttons are read back from the card event itself. An invite the listener did
not accept by itself parses to a RoomInvite: the core joins, cards an owner, or declines.

Answers: the acknowledgement (an ``m.notice``, with typing notices while the task runs) is
edited in place into live progress; the reply is ``m.text`` (notices do not notify), HTML
with a plain body, split when large, then any outbox files. Every reply event's
transaction id derives from the task id, so a re-send after a crash is de-duplicated by
the homeserver instead of posted twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import html
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TypeVar

from gateway_bot.channels.matrix.api import MatrixError
from gateway_bot.channels.matrix.events import (
    CARD_KEY,
    card_buttons,
    conversation_of,
    mentions_bot,
    parse_message,
    reaction_of,
    strip_leading_mention,
    user_allowed,
)
from gateway_bot.channels.matrix.files import save_attachments, upload_file
from gateway_bot.channels.matrix.listener import MatrixListener
from gateway_bot.channels.matrix.render import (
    card_content,
    edit_of,
    finished_content,
    in_conversation,
    message_content,
    notice_content,
    progress_content,
    reply_contents,
    without_mentions,
)
from gateway_bot.channels.matrix.session import MatrixSession
from gateway_bot.config.channels import MatrixChannelSettings
from gateway_bot.core.channel import AuthenticationError
from gateway_bot.core.inbox_files import InboxWriter
from gateway_bot.domain.messages import (
    Card,
    Decision,
    InboundMessage,
    JsonDict,
    Progress,
    RawMessage,
    Reply,
    RoomInvite,
)
from gateway_bot.state.database import Database

log = logging.getLogger(__name__)

CHANNEL = "matrix"
_TYPING_MS = 30_000
_TYPING_REFRESH_S = 20.0

T = TypeVar("T")


class MatrixAdapter:
    name = CHANNEL
    progress_interval_s = 1.0
    sends_where_it_listens = True
    """Sends wait for the listener's login (``core/channel.SendsWhereItListens``)."""

    def __init__(
        self, settings: MatrixChannelSettings, state_dir: Path, database: Database
    ) -> None:
        """``database``: the shared state database (open by the time the listener starts)."""
        self._settings = settings
        self._session = MatrixSession(settings, state_dir, database)
        self._listener = MatrixListener(self._session, CHANNEL)
        self._max_file_bytes = int(settings.max_file_mb * 1_000_000)
        self._typing: dict[str, set[str]] = {}
        self._typing_refresher: asyncio.Task[None] | None = None
        self._titles: dict[str, str] = {}

    @property
    def listener(self) -> MatrixListener:
        return self._listener

    async def _when_ready(self, call: Callable[[], Awaitable[T]]) -> T:
        """Wait for the login, then make one attempt. Retrying is the core's (one policy,
        ``core/retries.py``, outside its intake lock): a MatrixError says whether it is
        ``transient``. Sends carry transaction ids, so the core's retry never posts twice."""
        await self._session.ready()
        return await call()

    async def _send(self, room_id: str, content: JsonDict, txn_id: str) -> str:
        """Every message the bot sends goes out here, mentioning nobody: its text is the
        agent's or people's, and must not ping members by name or ``@room``."""
        session, silenced = self._session, without_mentions(content)
        return await self._when_ready(
            lambda: session.send_event(room_id, "m.room.message", silenced, txn_id)
        )

    # -- inbound -------------------------------------------------------------------------

    async def authenticate_and_parse(
        self, raw: RawMessage
    ) -> InboundMessage | Decision | RoomInvite:
        room_id = str(raw.payload["room_id"])
        if raw.payload.get("kind") == "invite":
            # Heard in the bot's own sync: the homeserver vouches for the inviter.
            return RoomInvite(
                channel=CHANNEL,
                room=room_id,
                room_title=str(raw.payload.get("room_title") or room_id),
                inviter_id=str(raw.payload["inviter"]),
                inviter_name=str(raw.payload.get("inviter_name") or raw.payload["inviter"]),
                received_at=raw.received_at,
            )
        event: JsonDict = raw.payload["event"]
        sender = str(event.get("sender", raw.sender))
        members = await self._joined_members(room_id, sender)
        if sender not in members:
            raise AuthenticationError(sender, f"not a joined member of {room_id}")
        if event.get("type") == "m.reaction":
            return await self._decision(room_id, event, sender, members[sender])
        return await self._parse_message(raw, room_id, event, sender, members)

    async def _joined_members(self, room_id: str, sender: str) -> Mapping[str, str]:
        """The room's joined members: from the sync when it can answer (no round trip
        between a message and its acknowledgement), else from the homeserver."""
        synced = self._listener.members.joined(room_id)
        if synced is not None:
            return synced
        api = self._session.api
        try:
            return await self._when_ready(lambda: api.joined_members(room_id))
        except MatrixError as exc:
            if exc.transient:
                raise
            raise AuthenticationError(sender, f"cannot see {room_id}'s members: {exc}") from exc

    async def still_allowed(self, message: InboundMessage) -> bool:
        """Still in ``allowed_users`` and still a joined member of the room (a scheduled
        run replays a message parsed when the schedule was made)."""
        if not user_allowed(message.sender_id, self._settings.allowed_users):
            return False
        api = self._session.api
        room_id = message.room
        try:
            members = await self._when_ready(lambda: api.joined_members(room_id))
        except MatrixError as exc:
            if exc.transient:
                raise
            return False
        return message.sender_id in members

    async def _parse_message(
        self,
        raw: RawMessage,
        room_id: str,
        event: JsonDict,
        sender: str,
        members: Mapping[str, str],
    ) -> InboundMessage:
        content: JsonDict = event.get("content") or {}
        parsed = parse_message(event)
        key, thread_root = conversation_of(
            room_id, raw.message_id, parsed.thread_root, self._settings.threads_in(room_id)
        )
        bot, names = self._session.user_id, self._session.bot_names()
        is_direct = len(members) == 2 or await self._session.store.is_direct(bot, room_id)
        return InboundMessage(
            channel=CHANNEL,
            message_id=raw.message_id,
            sender_id=sender,
            sender_name=members[sender],
            body=strip_leading_mention(parsed.body, bot, names),
            conversation_key=key,
            received_at=raw.received_at,
            channel_context={
                "room_id": room_id,
                "thread_root": thread_root,
                "event_id": raw.message_id,
            },
            attachments=parsed.attachments,
            sender_allowed=user_allowed(sender, self._settings.allowed_users),
            room=room_id,
            room_title=await self._room_title(room_id, members),
            is_direct=is_direct,
            mentioned=mentions_bot(content, bot, names),
        )

    async def _room_title(self, room_id: str, members: Mapping[str, str]) -> str:
        """The room's name, else (a direct chat) the other member's name, else its id."""
        if room_id not in self._titles:
            try:
                name = (await self._session.api.state_event(room_id, "m.room.name")).get("name")
            except MatrixError:
                name = None
            others = [n for user, n in members.items() if user != self._session.user_id]
            self._titles[room_id] = str(name or (others[0] if len(others) == 1 else room_id))
        return self._titles[room_id]

    async def _decision(
        self, room_id: str, event: JsonDict, sender: str, sender_name: str
    ) -> Decision:
        reaction = reaction_of(event)
        if reaction is None:
            raise AuthenticationError(sender, "not a reaction to a card")
        target, key = reaction
        session = self._session
        try:
            card = await self._when_ready(lambda: session.read_event(room_id, target))
        except MatrixError as exc:
            if exc.transient:
                raise
            raise AuthenticationError(sender, f"the card {target} cannot be read: {exc}") from exc
        if card.get("sender") != self._session.user_id:
            raise AuthenticationError(sender, f"{target} is not one of the bot's cards")
        for button in card_buttons(card):
            if button.get("emoji") == key and button.get("action_id"):
                timestamp = event.get("origin_server_ts")
                return Decision(
                    channel=CHANNEL,
                    action_id=str(button["action_id"]),
                    decider_id=sender,
                    decider_name=sender_name,
                    decided_at=timestamp / 1000 if isinstance(timestamp, int | float) else 0.0,
                )
        raise AuthenticationError(sender, f"{key} is not (or no longer) a button of {target}")

    async def save_attachments(self, message: InboundMessage, inbox: InboxWriter) -> list[str]:
        await self._session.ready()
        outcome = await save_attachments(
            self._session, message.attachments, inbox, self._max_file_bytes
        )
        if outcome.problems:
            await self._notice(message.channel_context, " ".join(outcome.problems))
        return outcome.saved

    # -- progress and replies ------------------------------------------------------------

    async def send_acknowledgement(self, context: JsonDict, task_id: str, text: str) -> None:
        room_id = str(context["room_id"])
        content = message_content(text, html.escape(text), "m.notice")
        placed = in_conversation(content, context.get("thread_root"), context.get("event_id"))
        event_id = await self._send(room_id, placed, f"gwb-{task_id}-ack")
        await self._session.store.save_progress_message(task_id, room_id, event_id)
        await self._start_typing(room_id, task_id)

    async def send_progress(self, context: JsonDict, progress: Progress) -> None:
        """Edit the acknowledgement; after a restart without one, post a new display. The
        closing update (``outcome`` set) turns it into the outcome and the step count."""
        room_id = str(context["room_id"])
        task_id = progress.task_id
        if progress.outcome is not None:
            await self._close_progress(room_id, task_id, progress)
            return
        content = progress_content(progress)
        ack = await self._session.store.progress_message(task_id)
        if ack is None:
            placed = in_conversation(content, context.get("thread_root"), context.get("event_id"))
            ack = await self._send(room_id, placed, f"gwb-{task_id}-progress")
            await self._session.store.save_progress_message(task_id, room_id, ack)
        else:
            await self._send(room_id, edit_of(ack, content), f"gwb-{task_id}-{uuid.uuid4().hex}")
        await self._start_typing(room_id, task_id)

    async def send_reply(self, context: JsonDict, task_id: str, reply: Reply) -> None:
        room_id = str(context["room_id"])
        thread_root, reply_to = context.get("thread_root"), context.get("event_id")
        await self._stop_typing(room_id, task_id)
        for part, content in enumerate(reply_contents(reply, self._settings.max_message_bytes)):
            placed = in_conversation(content, thread_root, reply_to)
            await self._send(room_id, placed, f"gwb-{task_id}-reply-{part}")
        for number, path in enumerate(reply.files):
            await self._send_file(context, Path(path), f"gwb-{task_id}-file-{number}")

    async def _close_progress(self, room_id: str, task_id: str, progress: Progress) -> None:
        """Edit the acknowledgement into the outcome; a task without one (a command's
        answer) has nothing to close."""
        assert progress.outcome is not None
        ack = await self._session.store.progress_message(task_id)
        if ack is None:
            return
        done = finished_content(progress.outcome, len(progress.steps) or None)
        await self._send(room_id, edit_of(ack, done), f"gwb-{task_id}-done")
        await self._session.store.forget_progress_message(task_id)

    async def _send_file(self, context: JsonDict, path: Path, txn_id: str) -> None:
        session, limit, room_id = self._session, self._max_file_bytes, str(context["room_id"])
        try:
            content = await self._when_ready(lambda: upload_file(session, room_id, path, limit))
        except (MatrixError, OSError) as exc:
            if isinstance(exc, MatrixError) and exc.transient:
                raise  # the core sends the reply again: same txn ids, no duplicate events
            reason = exc.error if isinstance(exc, MatrixError) else exc.strerror
            await self._notice(context, f"Could not send the file {path.name}: {reason}.")
            return
        placed = in_conversation(content, context.get("thread_root"), None)
        await self._send(str(context["room_id"]), placed, txn_id)

    async def _notice(self, context: JsonDict, text: str) -> None:
        content = in_conversation(
            notice_content(text), context.get("thread_root"), context.get("event_id")
        )
        await self._send(str(context["room_id"]), content, f"gwb-notice-{uuid.uuid4().hex}")

    async def send_rejection(self, context: JsonDict, text: str) -> None:
        await self._notice(context, text)

    async def join_room(self, room: str) -> None:
        api = self._session.api
        await self._when_ready(lambda: api.join(room))

    async def leave_room(self, room: str) -> None:
        api = self._session.api
        await self._when_ready(lambda: api.leave(room))

    # -- cards ---------------------------------------------------------------------------

    async def send_card(self, context: JsonDict, card: Card) -> str:
        """Post the card and pre-react with each button's emoji: pressing is reacting."""
        room_id = str(context["room_id"])
        content = in_conversation(card_content(card, CARD_KEY), context.get("thread_root"), None)
        # The txn id names the card's buttons (the approval's code): posting the same card
        # again (a restart between the post and the core recording it) returns the first
        # event instead of a second card.
        actions = "|".join(sorted(b.action_id for b in card.buttons)) or uuid.uuid4().hex
        card_txn = hashlib.sha256(actions.encode()).hexdigest()[:32]
        event_id = await self._send(room_id, content, f"gwb-card-{card_txn}")
        emojis = [b.emoji for b in card.buttons if b.emoji]
        await self._session.store.save_card(event_id, room_id, emojis)
        for emoji in emojis:
            # Best effort: the card is posted, and failing here would have the core post it
            # again. A missing pre-reaction still lets an owner react (or type !approve).
            try:
                await self._react(room_id, event_id, emoji)
            except MatrixError as exc:
                log.warning("matrix: could not pre-react %s on card %s: %s", emoji, event_id, exc)
        return event_id

    async def _react(self, room_id: str, event_id: str, emoji: str) -> str:
        reaction = {
            "m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": emoji}
        }
        key = hashlib.sha256(f"{event_id}|{emoji}".encode()).hexdigest()[:32]
        txn = f"gwb-react-{key}"
        return await self._session.send_event(room_id, "m.reaction", reaction, txn)

    async def update_card(self, context: JsonDict, card_ref: str, card: Card) -> None:
        room_id = str(context["room_id"])
        content = edit_of(card_ref, card_content(card, CARD_KEY))
        await self._send(room_id, content, f"gwb-card-edit-{uuid.uuid4().hex}")
        await self._session.store.save_card(
            card_ref, room_id, [b.emoji for b in card.buttons if b.emoji]
        )

    # -- typing --------------------------------------------------------------------------

    async def _start_typing(self, room_id: str, task_id: str) -> None:
        tasks = self._typing.setdefault(room_id, set())
        first = not tasks
        tasks.add(task_id)
        if first:
            await self._set_typing(room_id, True)
        if self._typing_refresher is None or self._typing_refresher.done():
            self._typing_refresher = asyncio.create_task(self._refresh_typing())

    async def _stop_typing(self, room_id: str, task_id: str) -> None:
        tasks = self._typing.get(room_id)
        if tasks is None:
            return
        tasks.discard(task_id)
        if not tasks:
            del self._typing[room_id]
            await self._set_typing(room_id, False)

    async def _refresh_typing(self) -> None:
        """Typing notices expire: renew them while any task in the room runs."""
        while self._typing:
            await asyncio.sleep(_TYPING_REFRESH_S)
            for room_id in list(self._typing):
                await self._set_typing(room_id, True)

    async def _set_typing(self, room_id: str, typing: bool) -> None:
        with contextlib.suppress(MatrixError):
            await self._session.api.typing(room_id, self._session.user_id, typing, _TYPING_MS)
