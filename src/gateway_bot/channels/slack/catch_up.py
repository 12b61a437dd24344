"""What was said while no listener ran, read back from Slack when a listener connects.

Slack delivers an event to a connected app, and retries one it could not deliver only a few
times (at once, after about a minute, after five): messages sent while no listener ran were
answered when Slack retried (a minute after a failover whose lease took 13 s) or, after a
longer outage, never, and nobody was told. So a listener that connects (starts, takes over,
reconnects) first reads what its workspace said since it was last heard
(``slack_heard_up_to``): every conversation the bot is a member of
(``users.conversations``), its top-level messages since then (``conversations.history``,
newest first, paged) and the replies in threads with replies since then, and the threads
the bot is in whose root is at most ``THREAD_LOOKBACK_S`` older
(``conversations.replies``, oldest first, paged). Each message goes through the same rules
as an event (``events.should_submit``) under the same message id, so the core runs it once
whether it comes from here, from the event, or from Slack's retry.

While connected the listener moves the mark to ``now - GRACE_S`` every ``MARK_EVERY_S``: an
event is heard within a second or two; one that failed to store is Slack's to retry.
A workspace never heard before starts its mark now (nothing older is read).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from gateway_bot.channels.slack.records import SlackRecords

log = logging.getLogger(__name__)

GRACE_S = 30.0
"""The mark trails the clock by this much: events in flight, clocks a little apart."""
MARK_EVERY_S = 10.0
THREAD_LOOKBACK_S = 14 * 86400.0
"""Replies are read in the bot's threads whose root is at most this much older than the
mark (a reply in an older thread, sent while no listener ran, is Slack's retries' only)."""
PAGE = 200
_TYPES = "public_channel,private_channel,mpim,im"

TakeEvent = Callable[[dict[str, Any]], Awaitable[None]]
"""Submit one message as if its event had arrived (``{"type": "message", "channel", ...}``)."""


async def catch_up(
    client: AsyncWebClient, records: SlackRecords, team: str, take: TakeEvent
) -> int:
    """Submit, oldest first, every message since the mark; then move the mark to when this
    began (less the grace). Returns how many messages were read."""
    began = time.time()
    since = await records.heard_up_to(team)
    if since is None:
        await records.set_heard_up_to(team, began - GRACE_S)
        return 0
    found: dict[tuple[str, str], dict[str, Any]] = {}
    async for conversation in _pages(client.users_conversations, "channels", types=_TYPES,
                                     exclude_archived=True, limit=PAGE):  # fmt: skip
        channel, kind = str(conversation.get("id", "")), _channel_type(conversation)
        if not channel:
            continue
        threads: set[str] = set()
        async for message in _pages(client.conversations_history, "messages", channel=channel,
                                    oldest=f"{since:.6f}", limit=PAGE):  # fmt: skip
            found[(channel, str(message.get("ts")))] = _as_event(message, channel, kind)
            if float(message.get("latest_reply") or 0) > since:
                threads.add(str(message.get("ts")))
        threads.update(await records.threads_since(team, channel, since - THREAD_LOOKBACK_S))
        for root in sorted(threads):
            async for reply in _pages(client.conversations_replies, "messages", channel=channel,
                                      ts=root, oldest=f"{since:.6f}", limit=PAGE):  # fmt: skip
                if float(reply.get("ts") or 0) > since:
                    found[(channel, str(reply.get("ts")))] = _as_event(reply, channel, kind)
    for _, event in sorted(found.items(), key=lambda item: float(item[0][1] or 0)):
        await take(event)
    await records.set_heard_up_to(team, began - GRACE_S)
    if found:
        log.info("slack: read %d message(s) sent since %.0f s before connecting", len(found),
                 began - since)  # fmt: skip
    return len(found)


async def _pages(call: Any, key: str, **arguments: Any) -> AsyncIterator[dict[str, Any]]:
    """Every item of a cursor-paged Web API list."""
    cursor = ""
    while True:
        response = await call(**arguments, **({"cursor": cursor} if cursor else {}))
        for item in response.get(key) or []:
            if isinstance(item, dict):
                yield item
        cursor = str((response.get("response_metadata") or {}).get("next_cursor") or "")
        if not cursor:
            return


def _channel_type(conversation: dict[str, Any]) -> str:
    """What an event's ``channel_type`` says for this conversation."""
    if conversation.get("is_im"):
        return "im"
    if conversation.get("is_mpim"):
        return "mpim"
    return "group" if conversation.get("is_private") else "channel"


def _as_event(message: dict[str, Any], channel: str, kind: str) -> dict[str, Any]:
    """A history message as its ``message`` event would have been. An edit made meanwhile
    is the text the person sent now: it was never heard before (``edited`` dropped)."""
    event = {k: v for k, v in message.items() if k != "edited"}
    event.update(type="message", channel=channel, channel_type=kind)
    event.setdefault("event_ts", message.get("ts"))
    return event
