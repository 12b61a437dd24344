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


class MatrixE2eeSettings(Section):
    """End-to-end encryption (Olm/Megolm through matrix-nio). The crypto store (the bot's
    device keys and sessions) lives under ``<state_dir>/matrix/crypto``, encrypted with
    ``pickle_key``; changing the key later makes the store unreadable."""

    enabled: bool = Field(default=True, description="Read and answer encrypted rooms.")
    pickle_key: str | None = Field(
        default=None,
        min_length=8,
        description="Encrypts the crypto store (use !env). Unset: a key generated once "
        "into <state_dir>/matrix/crypto/pickle-key (0600).",
    )
    trust: Literal["tofu", "all", "verified"] = Field(
        default="tofu",
        description="tofu: devices of allowed users are trusted when first seen, a changed "
        "key is refused; all: every device; verified: only the devices in verified_devices.",
    )
    undecryptable_notice_s: PositiveFloat = Field(
        default=30.0,
        description="A message still undecryptable after this long gets one notice.",
    )
    verified_devices: list[str] = Field(
        default_factory=list,
        description="Devices verified out of band, as '@user:server DEVICEID ED25519KEY' "
        "(the device id and session key a client shows): trusted in every mode.",
    )
    recovery_key: str | None = Field(
        default=None,
        description="Opens the account's secret storage (use !env): at start the bot signs "
        "its device with the self-signing key kept there, so Element shows it verified. "
        "Made by `gateway-bot matrix bootstrap-cross-signing`.",
    )

    @field_validator("verified_devices")
    @classmethod
    def _are_devices(cls, values: list[str]) -> list[str]:
        for value in values:
            parts = value.split()
            if len(parts) != 3 or not _MXID.match(parts[0]):
                raise ValueError(f"{value!r} is not '@user:server DEVICEID ED25519KEY'")
        return values


class MatrixChannelSettings(Section):
    """The bot's Matrix account and what it answers. Exactly one of access_token/password:
    with a password the bot logs in once and keeps that device (token under the state dir)."""

    enabled: bool = True
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
    e2ee: MatrixE2eeSettings = Field(default_factory=MatrixE2eeSettings)

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


class EmailChannelSettings(Section):
    """A mailbox read over IMAP (IDLE, else polling) and answered over SMTP. Only mail whose
    DMARC pass the MX recorded (the topmost Authentication-Results header with
    ``trusted_authserv_id``) counts; the MX must strip incoming headers carrying that id."""

    enabled: bool = True
    address: str = Field(
        pattern=r"^[^@\s]+@[^@\s]+$", description="The bot's address (replies come from it)."
    )
    imap_host: str
    imap_port: int = Field(default=993, ge=1, le=65535)
    imap_tls: Literal["tls", "starttls", "none"] = "tls"
    imap_user: str | None = Field(default=None, description="Unset: the address.")
    imap_password: str | None = Field(default=None, description="For auth: password.")
    auth: Literal["password", "oauth2"] = Field(
        default="password",
        description="oauth2: XOAUTH2 for IMAP and SMTP with a token from Microsoft's "
        "client-credentials flow (msal), refreshed before it expires.",
    )
    oauth2_authority: str | None = Field(
        default=None,
        pattern=r"^https://[^/]+/.+",
        description="e.g. https://login.microsoftonline.com/<tenant id>",
    )
    oauth2_client_id: str | None = None
    oauth2_client_secret: str | None = None
    oauth2_scopes: list[str] = Field(
        default_factory=lambda: ["https://outlook.office365.com/.default"], min_length=1
    )
    imap_folder: str = "INBOX"
    after_processing: Literal["move", "delete"] = Field(
        default="move", description="What happens to a mail once its task is stored."
    )
    processed_folder: str = "Processed"
    use_idle: bool = Field(default=True, description="False: poll every poll_interval_seconds.")
    poll_interval_seconds: PositiveFloat = 60.0
    reconnect_delays_seconds: list[PositiveFloat] = Field(
        default_factory=lambda: [10.0, 30.0, 60.0, 300.0], min_length=1
    )
    smtp_host: str
    smtp_port: int = Field(default=587, ge=1, le=65535)
    smtp_tls: Literal["tls", "starttls", "none"] = "starttls"
    smtp_user: str | None = Field(default=None, description="Unset: no SMTP login.")
    smtp_password: str | None = None
    trusted_authserv_id: str = Field(
        min_length=1, description="The authserv-id your MX writes in Authentication-Results."
    )
    allow_multiple_trusted_headers: bool = Field(
        default=False,
        description="Your MX writes one Authentication-Results per milter with its id.",
    )
    allowed_senders: list[str] = Field(
        default_factory=list, description="Addresses, or *@domain for a whole domain."
    )
    max_attachment_bytes: PositiveInt = 25 * 1024 * 1024
    acknowledge: bool = Field(
        default=False, description="Mail 'Working on it' when an allowed sender's mail arrives."
    )
    max_mail_bytes: PositiveInt = Field(
        default=50 * 1024 * 1024,
        description="A bigger mail is not read: its sender is told, and nothing runs.",
    )
    model_aliases: dict[str, str] = Field(
        default_factory=dict,
        description="bot+NAME@domain subaddresses -> model names, beside the models the "
        "agent section names and the agent CLIs' short names (opus, sonnet...); any other "
        "subaddress runs the default model, and the reply says so.",
    )

    @field_validator("allowed_senders")
    @classmethod
    def _are_addresses(cls, values: list[str]) -> list[str]:
        for value in values:
            if not re.fullmatch(r"(\*|[^@\s*]+)@[^@\s*]+", value):
                raise ValueError(f"{value!r} is neither user@domain nor *@domain")
        return [value.lower() for value in values]

    @model_validator(mode="after")
    def _credentials(self) -> EmailChannelSettings:
        if self.auth == "password" and not self.imap_password:
            raise ValueError("auth password needs imap_password")
        oauth2 = (self.oauth2_authority, self.oauth2_client_id, self.oauth2_client_secret)
        if self.auth == "oauth2" and not all(oauth2):
            raise ValueError(
                "auth oauth2 needs oauth2_authority, oauth2_client_id and oauth2_client_secret"
            )
        return self


class ChannelsSettings(Section):
    console: ConsoleChannelSettings | None = None
    matrix: MatrixChannelSettings | None = None
    slack: SlackChannelSettings | None = None
    email: EmailChannelSettings | None = None
