"""Builds the configured sandbox. The daemon calls this; nothing else picks a sandbox.

The podman sandbox is imported only when configured: podman-py (with requests and rich)
costs every start about half a second, ``sandbox: none`` included."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gateway_bot.config.sandbox import SandboxSettings
from gateway_bot.sandbox.base import Sandbox
from gateway_bot.sandbox.host import HostSandbox


def create_sandbox(
    settings: SandboxSettings, state_dir: Path, agent_files: Mapping[str, Path] | None = None
) -> Sandbox:
    """``agent_files`` (name -> host path) go into the agent image's build context."""
    if settings.kind == "none":
        return HostSandbox()
    from gateway_bot.sandbox.podman.sandbox import PodmanSandbox

    return PodmanSandbox(settings, state_dir, agent_files or {})
