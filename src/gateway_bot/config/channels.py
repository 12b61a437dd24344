"""Channel settings (the ``channels:`` section of the server config), one model per channel.

Plain pydantic models, no channel code: the core reads config, and must not pull a channel
package in through it.
"""

from __future__ import annotations

import re

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


class ChannelsSettings(Section):
    console: ConsoleChannelSettings | None = None
    matrix: MatrixChannelSettings | None = None
