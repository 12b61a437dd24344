"""Channel settings (the ``channels:`` section of the server config), one model per channel.

Plain pydantic models, no channel code: the core reads config, and must not pull a channel
package in through it.
"""

from __future__ import annotations

from pydantic import Field

from gateway_bot.config.section import Section


class ConsoleChannelSettings(Section):
    enabled: bool = True
    conversation: str = Field(default="default", min_length=1)


class ChannelsSettings(Section):
    console: ConsoleChannelSettings | None = None
