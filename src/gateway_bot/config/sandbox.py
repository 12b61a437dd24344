"""Sandbox settings (the ``sandbox:`` section of the server config)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway_bot.config.section import Section


class SandboxSettings(Section):
    kind: Literal["none"] = Field(
        default="none",
        description="'none' runs the agent on the host, unconfined. Loudly warned about.",
    )
