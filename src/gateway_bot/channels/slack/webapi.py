"""Small helpers around the Web API client shared by the adapter's parts."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse


def next_cursor(response: AsyncSlackResponse) -> str | None:
    """The cursor of the next page, or None on the last one."""
    data: Any = response.data
    if not isinstance(data, dict):
        return None
    cursor = (data.get("response_metadata") or {}).get("next_cursor")
    return str(cursor) if cursor else None


def keep_alive(client: AsyncWebClient) -> aiohttp.ClientSession:
    """Give ``client`` one aiohttp session whose connections stay open between calls.

    Without one, slack_sdk opens a session per call: a new TCP connection (and TLS
    handshake, against Slack) for every post, the acknowledgement's included (decision 0104:
    ~1 ms of a ~9 ms acknowledgement against the local fake). A connection Slack closed
    while idle fails the next call with ``ServerDisconnectedError``, which slack_sdk's
    default retry handler retries once on a new connection. The call timeout stays the
    client's (slack_sdk sets it on the sessions it makes, not per request)."""
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=client.timeout))
    client.session = session
    return session


async def let_go(client: AsyncWebClient, session: aiohttp.ClientSession) -> None:
    """Later calls go back to a session per call (the daemon still posts replies after its
    listener stopped); ``session`` is closed once a call already holding it has had its
    timeout to end. Closed at once, it failed replies in flight: slack_sdk picks the
    session before its retries, so the retry of a reply used the closed session too."""
    if client.session is session:
        client.session = None
    closing = asyncio.create_task(_close_after(session, float(client.timeout)))
    _closing.add(closing)
    closing.add_done_callback(_closing.discard)


_closing: set[asyncio.Task[None]] = set()
"""Sessions let go of and not yet closed (a reference each while their task runs)."""


async def _close_after(session: aiohttp.ClientSession, delay_s: float) -> None:
    try:
        await asyncio.sleep(delay_s)
    finally:  # at once when the daemon stops (its running tasks were waited for first)
        await session.close()
