"""The bot's posts for a task, each made exactly once, even across a crash inside the call.

Slack has no idempotency key: ``chat.postMessage`` called twice posts twice. So every post
the adapter makes for a task (acknowledgement, reply parts) goes through ``post_once``: a
local record (``records.py``) before and after the call, and messages carry ``metadata``
with the task id, so a post the daemon died inside can be found in the thread
(conversations.replies) instead of being posted again. Kept apart from the adapter, which
decides what to say; this module only makes sure it is said once.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from gateway_bot.channels.slack.records import SlackRecords
from gateway_bot.channels.slack.webapi import next_cursor
from gateway_bot.core.fault_points import reached
from gateway_bot.domain.messages import JsonDict

log = logging.getLogger(__name__)

PREPARED_KEPT = 1000
"""Prepared acknowledgements remembered at most (one not posted is forgotten, oldest first:
its post then looks in Slack first, as after a restart)."""

METADATA_EVENT = "gateway_bot_post"
"""Message metadata event type marking the bot's posts with their task id and part."""


class SlackPosts:
    def __init__(self, client: AsyncWebClient, records: SlackRecords) -> None:
        self._client = client
        self._records = records
        self._prepared: dict[str, None] = {}
        """Tasks whose acknowledgement intent this process wrote and has not posted yet
        (``prepare_acknowledgement``): their post looks nothing up first."""

    async def prepare_acknowledgement(self, task_id: str, channel: str) -> None:
        """Write the acknowledgement's intent ahead of its post (the adapter's
        ``prepare_acknowledgement``), and remember it so the post skips the write."""
        if await self._records.intend_post(task_id, "ack", 0, channel):
            self._prepared[task_id] = None
            if len(self._prepared) > PREPARED_KEPT:
                del self._prepared[next(iter(self._prepared))]

    async def post_once(
        self, task_id: str, kind: str, part: int, context: JsonDict, text: str
    ) -> str:
        """Post (task, kind, part) unless it already was; return its ts ("" for a post
        whose record retention removed meanwhile). The intent is written first (or was,
        during the flush: ``prepare_acknowledgement``) and read back only when it was there
        already (decision 0104: no write or one, not a read and a write, before a first post)."""
        channel = str(context["channel"])
        thread = context.get("thread_ts") or None
        prepared = kind == "ack" and part == 0 and task_id in self._prepared
        if prepared:  # (forgotten before the call: a retry after it looks in Slack first)
            del self._prepared[task_id]
        if prepared or await self._records.intend_post(task_id, kind, part, channel):
            reached("slack_post_intended")
        else:
            record = await self._records.post(task_id, kind, part)
            if record is None:  # confirmed long ago, pruned between the two statements
                return ""
            if record.ts is not None:
                return record.ts
            found = await self._find_post(channel, thread, task_id, kind, part, record.intended_at)
            if found is not None:
                log.info("task %s: %s %d was already posted (%s)", task_id, kind, part, found)
                await self._records.confirm_post(task_id, kind, part, found)
                return found
        response = await self._client.chat_postMessage(
            channel=channel,
            thread_ts=thread,
            text=text,
            unfurl_links=False,
            unfurl_media=False,
            metadata={
                "event_type": METADATA_EVENT,
                "event_payload": {"task_id": task_id, "kind": kind, "part": part},
            },
        )
        ts = str(response["ts"])
        reached("slack_posted")
        await self._records.confirm_post(task_id, kind, part, ts)
        return ts

    async def _find_post(
        self, channel: str, thread: str | None, task_id: str, kind: str, part: int, since: float
    ) -> str | None:
        """The ts of our post for (task, kind, part) in the thread, by its metadata."""
        wanted = {"task_id": task_id, "kind": kind, "part": part}
        cursor: str | None = None
        while True:
            arguments: dict[str, Any] = {
                "channel": channel,
                "oldest": f"{since - 5:.6f}",
                "include_all_metadata": True,
                "limit": 200,
                "cursor": cursor,
            }
            if thread:
                response = await self._client.conversations_replies(ts=thread, **arguments)
            else:
                response = await self._client.conversations_history(**arguments)
            for message in response.get("messages") or []:
                metadata = message.get("metadata") or {}
                if (
                    metadata.get("event_type") == METADATA_EVENT
                    and metadata.get("event_payload") == wanted
                ):
                    return str(message["ts"])
            cursor = next_cursor(response)
            if not cursor:
                return None
