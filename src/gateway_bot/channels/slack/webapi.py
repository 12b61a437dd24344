"""Small helpers around the Web API client shared by the adapter's parts."""

from __future__ import annotations

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
    handshake, against Slack) for every post, the acknowledgement's included (issue 19:
    ~1 ms of a ~9 ms acknowledgement against the local fake). A connection Slack closed
    while idle fails the next call with ``ServerDisconnectedError``, which slack_sdk's
    default retry handler retries once on a new connection. The call timeout stays the
    client's (slack_sdk sets it on the sessions it makes, not per request)."""
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=client.timeout))
    client.session = session
    return session


async def let_go(client: AsyncWebClient, session: aiohttp.ClientSession) -> None:
    """Close ``session``; later calls go back to a session per call (the daemon still
    posts replies after its listener stopped)."""
    if client.session is session:
        client.session = None
    await session.close()
