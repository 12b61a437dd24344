"""Small helpers around the Web API client shared by the adapter's parts."""

from __future__ import annotations

from typing import Any

from slack_sdk.web.async_slack_response import AsyncSlackResponse


def next_cursor(response: AsyncSlackResponse) -> str | None:
    """The cursor of the next page, or None on the last one."""
    data: Any = response.data
    if not isinstance(data, dict):
        return None
    cursor = (data.get("response_metadata") or {}).get("next_cursor")
    return str(cursor) if cursor else None
