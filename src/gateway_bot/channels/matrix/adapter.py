"""The Matrix channel as the core sees it: authenticate and parse, then answer.

Authentication is membership (``inbound.py``): a message counts only if its sender is
joined to the room now; a reaction that presses a card's button is a Decision, an invite
the listener did not accept by itself a RoomInvite.

Answers: the acknowledgement (an ``m.notice``, with typing notices while the task runs) is
edited in place into live progress; the reply is ``m.text`` (notices do not notify), HTML
with a plain body, split when large, then any outbox files. Every reply event's
transaction id derives from the task id, so a re-send after a crash is de-duplicated by
the homeserver instead of posted twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import logging
import uuid
from pathlib import Path

from gateway_bot.channels.matrix.api import MatrixError
from gateway_bot.channels.matrix.events import CARD_KEY
from gateway_bot.channels.matrix.files import save_attachments, upload_file
from gateway_bot.channels.matrix.inbound import InboundParser
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
from gateway_bot.channels.matrix.typing_notices import RoomTyping
from gateway_bot.config.channels import MatrixChannelSettings
from gateway_bot.core.workspaces.inbox_files import InboxWriter
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
        self._inbound = InboundParser(settings, self._session, self._listener.members, CHANNEL)
        self._max_file_bytes = int(settings.max_file_mb * 1_000_000)
        self._typing = RoomTyping(self._set_typing)

    @property
    def listener(self) -> MatrixListener:
        return self._listener

    async def _send(
        self, room_id: str, content: JsonDict, txn_id: str, *, acknowledgement: bool = False
    ) -> str:
        """Every message the bot sends goes out here, mentioning nobody: its text is the
        agent's or people's, and must not ping members by name or ``@room``."""
        session, silenced = self._session, without_mentions(content)
        return await session.when_ready(
            lambda: session.send_event(
                room_id, "m.room.message", silenced, txn_id, acknowledgement=acknowledgement
            )
        )

    # -- inbound -------------------------------------------------------------------------

    async def authenticate_and_parse(
        self, raw: RawMessage
    ) -> InboundMessage | Decision | RoomInvite:
        return await self._inbound.authenticate_and_parse(raw)

    async def still_allowed(self, message: InboundMessage) -> bool:
        return await self._inbound.still_allowed(message)

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
        event_id = await self._send(room_id, placed, f"gwb-{task_id}-ack", acknowledgement=True)
        await self._session.store.save_progress_message(task_id, room_id, event_id)
        self._typing.start(room_id, task_id)

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
        self._typing.start(room_id, task_id)

    async def send_reply(self, context: JsonDict, task_id: str, reply: Reply) -> None:
        room_id = str(context["room_id"])
        thread_root, reply_to = context.get("thread_root"), context.get("event_id")
        await self._typing.stop(room_id, task_id)
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
            content = await session.when_ready(lambda: upload_file(session, room_id, path, limit))
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
        await self._session.when_ready(lambda: api.join(room))

    async def leave_room(self, room: str) -> None:
        api = self._session.api
        await self._session.when_ready(lambda: api.leave(room))

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

    async def _set_typing(self, room_id: str, typing: bool) -> None:
        with contextlib.suppress(MatrixError):
            await self._session.api.typing(room_id, self._session.user_id, typing, _TYPING_MS)
