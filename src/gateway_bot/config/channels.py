"""Channel settings (the ``channels:`` section of the server config), one model per channel.

Plain pydantic models, no channel code: the core reads config, and must not pull a channel
package in through it.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_validator, model_validator

from gateway_bot.config.section import Section


class ConsoleChannelSettings(Section):
    enabled: bool = True
    conversation: str = Field(default="default", min_length=1)


_MXID = re.compile(r"^@[^:\s]+:[^\s]+$")


class MatrixRoomSettings(Section):
    threads: bool | None = Field(
        default=None, description="Each Matrix thread is its own conversation (unset: the default)."
    )


class MatrixChannelSettings(Section):
    """The bot's Matrix account and what it answers. Exactly one of access_token/password:
    with a password the bot logs in once and keeps that device (token under the state dir)."""

    homeserver: str = Field(pattern=r"^https?://", description="Client-server API base URL.")
    user_id: str = Field(description="The bot's MXID, e.g. @gateway:example.org.")
    access_token: str | None = None
    password: str | None = None
    device_name: str = "gateway-bot"
    allowed_users: list[str] = Field(
        default_factory=list,
        description="Who may run tasks: full MXIDs or @*:server for everyone on a server.",
    )
    threads: bool = Field(
        default=False, description="Default for rooms: each thread is its own conversation."
    )
    rooms: dict[str, MatrixRoomSettings] = Field(
        default_factory=dict, description="Per room id overrides."
    )
    max_file_mb: PositiveFloat = Field(default=50.0, description="Largest file downloaded.")
    max_message_bytes: int = Field(
        default=24000, ge=2000, le=30000, description="Reply parts are split above this size."
    )
    sync_timeout_seconds: PositiveFloat = 30.0
    sync_timeline_limit: PositiveInt = 50

    @field_validator("user_id")
    @classmethod
    def _is_mxid(cls, value: str) -> str:
        if not _MXID.match(value):
            raise ValueError("must be a full Matrix user id such as @bot:example.org")
        return value

    @field_validator("allowed_users")
    @classmethod
    def _are_patterns(cls, values: list[str]) -> list[str]:
        for value in values:
            if not _MXID.match(value):
                raise ValueError(f"{value!r} is neither @user:server nor @*:server")
        return values

    @model_validator(mode="after")
    def _one_credential(self) -> MatrixChannelSettings:
        if (self.access_token is None) == (self.password is None):
            raise ValueError("set exactly one of access_token and password")
        return self

    def threads_in(self, room_id: str) -> bool:
        room = self.rooms.get(room_id)
        return self.threads if room is None or room.threads is None else room.threads


class SlackChannelSettings(Section):
    """A Slack app: bot token always; Socket Mode needs the app token, the HTTP Events API
    the signing secret. Only events of ``team_ids`` count."""

    enabled: bool = True
    bot_token: str = Field(min_length=1, description="Bot token (xoxb-...).")
    app_token: str | None = Field(default=None, description="App-level token (xapp-...).")
    signing_secret: str | None = Field(default=None, description="For transport: http.")
    transport: Literal["socket", "http"] = "socket"
    http_host: str = Field(default="127.0.0.1", description="Put a TLS proxy in front.")
    http_port: int = Field(default=3000, ge=1, le=65535)
    http_path: str = Field(default="/slack/events", pattern=r"^/")
    team_ids: list[str] = Field(min_length=1, description="Workspaces (T...) served.")
    allowed_users: list[str] = Field(default_factory=list, description="User ids (U...).")
    allowed_user_groups: list[str] = Field(default_factory=list, description="Groups (S...).")
    allow_workspace: bool = Field(default=False, description="Everyone in team_ids is allowed.")
    allow_guests: bool = False
    listen: Literal["all", "engaging"] = Field(
        default="all",
        description="all: every message people type where the bot is goes to the core's "
        "engage rules; engaging: only DMs, mentions and replies in the bot's threads.",
    )
    api_base_url: str = Field(default="https://slack.com/api/", pattern=r"^https?://.*/$")
    max_file_bytes: PositiveInt = 50 * 1024 * 1024
    progress_interval_seconds: PositiveFloat = 1.0
    reconnect_max_delay_seconds: PositiveFloat = 60.0

    @model_validator(mode="after")
    def _transport_credentials(self) -> SlackChannelSettings:
        if self.transport == "socket" and not self.app_token:
            raise ValueError("transport socket needs app_token (xapp-...)")
        if self.transport == "http" and not self.signing_secret:
            raise ValueError("transport http needs signing_secret")
        return self


class ChannelsSettings(Section):
    console: ConsoleChannelSettings | None = None
    matrix: MatrixChannelSettings | None = None
    slack: SlackChannelSettings | None = None
