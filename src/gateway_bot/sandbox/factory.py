"""Builds the configured sandbox. The daemon calls this; nothing else picks a sandbox."""

from __future__ import annotations

from pathlib import Path

from gateway_bot.config.sandbox import SandboxSettings
from gateway_bot.sandbox.base import Sandbox
from gateway_bot.sandbox.host import HostSandbox


def create_sandbox(settings: SandboxSettings, state_dir: Path) -> Sandbox:
    return HostSandbox()
