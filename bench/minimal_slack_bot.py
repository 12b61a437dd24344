"""The floor for a Slack bot's acknowledgement: a Socket Mode client that answers a message
the moment it arrives (ack the envelope, post "Working on it…" in the thread), no store, no
work; in its own process as the daemon is.

    python -m bench.minimal_slack_bot API_BASE_URL BOT_TOKEN APP_TOKEN BOT_USER
"""

from __future__ import annotations

import asyncio
import json
import sys

import aiohttp


async def serve(base_url: str, bot_token: str, app_token: str, bot_user: str) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{base_url}apps.connections.open", headers={"Authorization": f"Bearer {app_token}"}
        ) as answer:
            url = (await answer.json())["url"]
        async with http.ws_connect(url) as ws:
            print("ready", flush=True)
            async for frame in ws:
                if frame.type is not aiohttp.WSMsgType.TEXT:
                    continue
                envelope = json.loads(frame.data)
                if "envelope_id" not in envelope:
                    continue
                await ws.send_json({"envelope_id": envelope["envelope_id"]})
                event = (envelope.get("payload") or {}).get("event") or {}
                if event.get("type") != "message" or event.get("user") in (None, bot_user):
                    continue
                post = {
                    "channel": event["channel"],
                    "thread_ts": event.get("thread_ts") or event["ts"],
                    "text": "Working on it…",
                }
                headers = {"Authorization": f"Bearer {bot_token}"}
                async with http.post(
                    f"{base_url}chat.postMessage", json=post, headers=headers
                ) as answer:
                    await answer.read()


def main() -> None:
    asyncio.run(serve(*sys.argv[1:5]))


if __name__ == "__main__":
    main()
