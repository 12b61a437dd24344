"""Who is joined to each of the bot's rooms, as the bot's own /sync says, so a message's
sender is authenticated without a ``joined_members`` round trip on every message (decision 0105:
it sat between a message's arrival and its acknowledgement).

Kept from the sync's raw JSON, not from matrix-nio's room objects: nio skips a member event
its schema refuses (a ``reason`` that is not a string...), which would leave a departed
member joined; here such an event makes the room unknown instead.

A room's members are known only when the sync gave its whole membership: a full-state sync
(the first of the process), or the batch in which the bot newly joined the room (the spec
and Synapse send the full state then; the filter never lazy-loads members). After that each
batch's member events, state block first, then the timeline in order, keep it current, so
when a batch's messages are authenticated the members are those at the batch's end, what
``joined_members`` would have said: a member who spoke and then left in one batch is
refused, one who joined and then spoke is accepted. Anything else answers None and the
adapter asks the homeserver: a room seen only in deltas, a room with a malformed member
event, a room the bot left, and every room while the last sync failed (the state may be
behind the homeserver's) or before the process's first sync (a task recovered at start).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

JsonDict = dict[str, Any]

_NOT_JOINED = frozenset({"leave", "ban", "invite", "knock"})


class RoomMembers:
    def __init__(self) -> None:
        self._rooms: dict[str, dict[str, str]] = {}
        self._current = False

    def joined(self, room_id: str) -> Mapping[str, str] | None:
        """Joined members and their display names (the user id when they set none), or
        None when the sync cannot answer for the room (the homeserver must be asked)."""
        if not self._current:
            return None
        members = self._rooms.get(room_id)
        return dict(members) if members is not None else None

    def lost(self) -> None:
        """A sync failed or the login changed: nothing is answered until one succeeds."""
        self._current = False

    def follow(self, response: JsonDict, *, full_state: bool, known_rooms: Iterable[str]) -> None:
        """Apply one sync response, before any of its messages is handed on.

        ``full_state``: the request asked for it. ``known_rooms``: the rooms the bot was
        joined to before this batch (a room outside them is newly joined: full state)."""
        rooms = response.get("rooms") or {}
        if full_state:
            self._rooms.clear()
        known = set(known_rooms)
        for room_id, joined in (rooms.get("join") or {}).items():
            members = self._rooms.get(room_id)
            if members is None:
                if not full_state and room_id in known:
                    continue  # only deltas of it here: its whole membership is not
                members = {}
            events = [*_events(joined, "state"), *_events(joined, "timeline")]
            if _apply(members, events):
                self._rooms[room_id] = members
            else:
                self._rooms.pop(room_id, None)
        for room_id in rooms.get("leave") or {}:
            self._rooms.pop(room_id, None)
        self._current = True


def _events(joined: JsonDict, section: str) -> list[JsonDict]:
    events = (joined.get(section) or {}).get("events") or []
    return [event for event in events if isinstance(event, dict)]


def _apply(members: dict[str, str], events: list[JsonDict]) -> bool:
    """Apply member events in order; False at one that cannot be read (the room is then
    unknown: the homeserver answers for it)."""
    for event in events:
        if event.get("type") != "m.room.member":
            continue
        user, content = event.get("state_key"), event.get("content")
        if not isinstance(user, str) or not isinstance(content, dict):
            return False
        membership = content.get("membership")
        if not isinstance(membership, str):
            return False  # a list or a dict would not even hash: the room is unknown
        if membership == "join":
            name = content.get("displayname")
            members[user] = name if isinstance(name, str) and name else user
        elif membership in _NOT_JOINED:
            members.pop(user, None)
        else:
            return False
    return True
