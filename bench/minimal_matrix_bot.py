"""The floor for a Matrix bot's acknowledgement: a matrix-nio client that sends a reply the
moment it syncs a message (no store, no work), in its own process as the daemon is.

    python -m bench.minimal_matrix_bot HOMESERVER USER_ID DEVICE_ID ACCESS_TOKEN

It long-polls /sync exactly as the daemon does (30 s timeout) and answers every
``m.room.message`` from someone else with an ``m.notice`` replying to it.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from nio import AsyncClient


async def serve(homeserver: str, user_id: str, device_id: str, token: str) -> None:
    client = AsyncClient(homeserver, user_id)
    client.restore_login(user_id, device_id, token)
    since: str | None = None
    first = True
    while True:
        answer: Any = await client.sync(timeout=0 if first else 30000, since=since)
        since = getattr(answer, "next_batch", None) or since
        rooms = getattr(answer, "rooms", None)
        if rooms is None:
            await asyncio.sleep(0.1)
            continue
        for room_id in rooms.invite:
            await client.join(room_id)
        if first:  # old history is not answered
            first = False
            print("ready", flush=True)
            continue
        for room_id, info in rooms.join.items():
            for event in info.timeline.events:
                source = event.source
                if source.get("type") != "m.room.message" or source.get("sender") == user_id:
                    continue
                content = {
                    "msgtype": "m.notice",
                    "body": "Working on it…",
                    "m.relates_to": {"m.in_reply_to": {"event_id": source["event_id"]}},
                }
                await client.room_send(room_id, "m.room.message", content)


def main() -> None:
    homeserver, user_id, device_id, token = sys.argv[1:5]
    asyncio.run(serve(homeserver, user_id, device_id, token))


if __name__ == "__main__":
    main()
