"""Small helpers around the Web API client shared by the adapter's parts."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_slack_response import AsyncSlackResponse

T = TypeVar("T")


async def retrying(call: Callable[[], Awaitable[T]], attempts: int = 3) -> T:
    """A read retried on network trouble (never on Slack's own error answers), so a blip
    does not strand a message half-way through authentication."""
    for attempt in range(1, attempts + 1):
        try:
            return await call()
        except SlackApiError:
            raise
        except Exception:
            if attempt == attempts:
                raise
            await asyncio.sleep(float(attempt))
    raise AssertionError("unreachable")


def next_cursor(response: AsyncSlackResponse) -> str | None:
    """The cursor of the next page, or None on the last one."""
    data: Any = response.data
    if not isinstance(data, dict):
        return None
    cursor = (data.get("response_metadata") or {}).get("next_cursor")
    return str(cursor) if cursor else None
