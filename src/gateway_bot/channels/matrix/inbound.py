"""What the Matrix listener stored, authenticated and parsed into the core's terms (the
adapter's ``authenticate_and_parse`` and ``still_allowed``), apart from the adapter's
answering: deciding who may speak is the channel's security boundary, and reads on its own.

Authentication is membership: a message counts only if its sender is joined to the room now,
as the bot's own sync last said (``members.py``: at the end of the message's batch or a
later one), else as the homeserver says (``joined_members``: before the process's first
sync, while syncs fail, in a room whose whole membership the sync did not give). A joined
member outside ``allowed_users`` parses with ``sender_allowed=False`` and the core's
approval policy decides. A reaction that presses a card's button parses to a Decision;
the card's buttons are read back from the card event itself. An invite the listener did
not accept by itself parses to a RoomInvite: the core joins, cards an owner, or declines.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway_bot.channels.matrix.api import MatrixError
from gateway_bot.channels.matrix.events import (
    card_buttons,
    conversation_of,
    mentions_bot,
    parse_message,
    reaction_of,
    strip_leading_mention,
    user_allowed,
)
from gateway_bot.channels.matrix.members import RoomMembers
from gateway_bot.channels.matrix.session import MatrixSession
from gateway_bot.config.channels import MatrixChannelSettings
from gateway_bot.core.channel import AuthenticationError
from gateway_bot.domain.messages import (
    Decision,
    InboundMessage,
    JsonDict,
    RawMessage,
    RoomInvite,
)


class InboundParser:
    def __init__(
        self,
        settings: MatrixChannelSettings,
        session: MatrixSession,
        members: RoomMembers,
        channel: str,
    ) -> None:
        """``members``: the listener's, kept current by its syncs."""
        self._settings = settings
        self._session = session
        self._members = members
        self._channel = channel
        self._titles: dict[str, str] = {}

    async def authenticate_and_parse(
        self, raw: RawMessage
    ) -> InboundMessage | Decision | RoomInvite:
        room_id = str(raw.payload["room_id"])
        if raw.payload.get("kind") == "invite":
            # Heard in the bot's own sync: the homeserver vouches for the inviter.
            return RoomInvite(
                channel=self._channel,
                room=room_id,
                room_title=str(raw.payload.get("room_title") or room_id),
                inviter_id=str(raw.payload["inviter"]),
                inviter_name=str(raw.payload.get("inviter_name") or raw.payload["inviter"]),
                received_at=raw.received_at,
                is_direct=raw.payload.get("direct") is True,
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
        synced = self._members.joined(room_id)
        if synced is not None:
            return synced
        api = self._session.api
        try:
            return await self._session.when_ready(lambda: api.joined_members(room_id))
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
            members = await self._session.when_ready(lambda: api.joined_members(room_id))
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
            channel=self._channel,
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
            card = await session.when_ready(lambda: session.read_event(room_id, target))
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
                    channel=self._channel,
                    action_id=str(button["action_id"]),
                    decider_id=sender,
                    decider_name=sender_name,
                    decided_at=timestamp / 1000 if isinstance(timestamp, int | float) else 0.0,
                )
        raise AuthenticationError(sender, f"{key} is not (or no longer) a button of {target}")
