"""The /sync filter: only what the bot acts on, stored on the homeserver once.

A sync that names an inline filter has the homeserver parse it on every poll; one stored
(``POST /user/{id}/filter``) is named by its id (decision 0113: part of the sync work that
competed with people's clients being woken).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from gateway_bot.channels.matrix.api import MatrixApi, MatrixError

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]

_TIMELINE_TYPES = [
    "m.room.message",
    "m.room.encrypted",
    "m.reaction",
    "m.room.member",
    "m.room.encryption",
]
_STATE_TYPES = ["m.room.member", "m.room.encryption"]
"""nio needs every member (whose devices get room keys) and the encryption state."""


def sync_filter(timeline_limit: int) -> str:
    """Only what the bot acts on (messages, reactions, encrypted events, memberships) and
    what encryption needs (members, the room's encryption state)."""
    nothing: JsonDict = {"types": []}
    room = {
        "timeline": {"limit": timeline_limit, "types": _TIMELINE_TYPES},
        "state": {"types": _STATE_TYPES, "lazy_load_members": False},
        "ephemeral": nothing,
        "account_data": nothing,
    }
    return json.dumps({"room": room, "presence": nothing, "account_data": nothing})


async def stored_filter(api: MatrixApi, user_id: str, filter_json: str) -> str:
    """The filter's id on the homeserver. A homeserver that refuses to store it gets the
    filter inline, as before; one that cannot be reached, a lost login or a busy server
    raise, as a failed sync does (retried by the listener's own handling)."""
    try:
        return await api.upload_filter(user_id, filter_json)
    except MatrixError as exc:
        if exc.status in (0, 401, 429) or exc.status >= 500:
            raise
        log.warning("matrix: the homeserver did not store the sync filter (%s)", exc)
        return filter_json
