"""Who is talking, and may they: workspace, bots, deleted users, guests, allow lists.

The rules are pure (``refusal``, ``is_allowed``); ``Directory`` fetches the facts from the
Web API (users.info, usergroups.users.list, conversations.info) and caches them for a few
minutes, so a busy thread does not cost one lookup per message.

Two outcomes matter to the core: a *refusal* (another workspace, a bot, a deleted user, a
guest when guests are refused) raises AuthenticationError and nothing more happens; a
person of the workspace who is simply not on the allow lists is *not allowed*
(``sender_allowed=False``), which the core's approval policy decides about.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from gateway_bot.config.channels import SlackChannelSettings

log = logging.getLogger(__name__)

_TTL_S = 300.0


@dataclass(frozen=True)
class SlackUser:
    id: str
    name: str
    team_id: str
    is_bot: bool = False
    deleted: bool = False
    is_guest: bool = False

    @classmethod
    def from_api(cls, user: dict[str, Any]) -> SlackUser:
        profile = user.get("profile") or {}
        name = (
            profile.get("display_name")
            or profile.get("real_name")
            or user.get("real_name")
            or user.get("name")
            or user["id"]
        )
        return cls(
            id=str(user["id"]),
            name=str(name),
            team_id=str(user.get("team_id") or ""),
            is_bot=bool(user.get("is_bot") or user.get("is_app_user")),
            deleted=bool(user.get("deleted")),
            is_guest=bool(user.get("is_restricted") or user.get("is_ultra_restricted")),
        )


def foreign_team(team_ids: Collection[str], settings: SlackChannelSettings) -> str | None:
    """The first team id that is not one of the configured workspaces, if any."""
    for team in team_ids:
        if team and team not in settings.team_ids:
            return team
    return None


def refusal(user: SlackUser, settings: SlackChannelSettings) -> str | None:
    """Why this user is refused outright, or None."""
    if user.team_id and user.team_id not in settings.team_ids:
        return f"user of another workspace ({user.team_id})"
    if user.is_bot:
        return "bots are not served"
    if user.deleted:
        return "deactivated user"
    if user.is_guest and not settings.allow_guests:
        return "guest accounts are refused (channels.slack.allow_guests)"
    return None


def is_allowed(
    user_id: str, group_members: Collection[str], settings: SlackChannelSettings
) -> bool:
    return settings.allow_workspace or user_id in settings.allowed_users or user_id in group_members


class Directory:
    def __init__(self, client: AsyncWebClient) -> None:
        self._client = client
        self._users: dict[str, tuple[float, SlackUser]] = {}
        self._groups: dict[str, tuple[float, frozenset[str]]] = {}
        self._titles: dict[str, tuple[float, str]] = {}

    async def user(self, user_id: str) -> SlackUser:
        cached = self._users.get(user_id)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        response = await self._client.users_info(user=user_id)
        user = SlackUser.from_api(response["user"])
        self._users[user_id] = (time.monotonic() + _TTL_S, user)
        return user

    async def members_of(self, groups: Collection[str]) -> frozenset[str]:
        members: set[str] = set()
        for group in groups:
            cached = self._groups.get(group)
            if cached is None or cached[0] <= time.monotonic():
                try:
                    response = await self._client.usergroups_users_list(usergroup=group)
                    users = frozenset(response.get("users") or ())
                except SlackApiError as exc:  # a wrong group id admits nobody, loudly
                    log.warning("user group %s: %s", group, exc.response.get("error"))
                    users = frozenset()
                cached = (time.monotonic() + _TTL_S, users)
                self._groups[group] = cached
            members |= cached[1]
        return frozenset(members)

    async def room_title(self, channel_id: str, fallback: str) -> str:
        """``#general``, or the fallback (a DM) when the channel has no name or cannot be read."""
        cached = self._titles.get(channel_id)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        try:
            response = await self._client.conversations_info(channel=channel_id)
            name = (response.get("channel") or {}).get("name")
        except Exception:  # a title is decoration: never refuse a message over it
            name = None
        title = f"#{name}" if name else fallback
        self._titles[channel_id] = (time.monotonic() + _TTL_S, title)
        return title
