"""``gateway-bot image build`` and ``gateway-bot image bootstrap``: the images, on demand.

The daemon builds a missing image itself before a task; these commands do it ahead of time
with the build's progress on the terminal (the set-up step runs them), and skip what is up
to date.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from pathlib import Path

from gateway_bot.config.sandbox import SandboxSettings
from gateway_bot.sandbox.podman.bootstrap import bootstrap_base
from gateway_bot.sandbox.podman.images import ImageBuilder
from gateway_bot.sandbox.podman.service import PodmanService


async def _print(line: str) -> None:
    print(line, flush=True)


def _parts(settings: SandboxSettings, state_dir: Path) -> tuple[PodmanService, Path]:
    work_dir = state_dir / "sandbox"
    return PodmanService(settings.podman, work_dir), work_dir


async def build_images(
    settings: SandboxSettings,
    state_dir: Path,
    agent_files: Mapping[str, Path],
    containerfile: Path | None = None,
) -> None:
    """The agent image (default Containerfile, or ``containerfile``) and the proxy image."""
    service, work_dir = _parts(settings, state_dir)
    await service.check()
    if not agent_files:
        print(
            "warning: the agent binary was not found on PATH; the build may fail", file=sys.stderr
        )
    builder = ImageBuilder(service, settings.image, agent_files, work_dir, limits=settings.limits)
    print(f"base image: {await builder.base_image()}", flush=True)
    text = await asyncio.to_thread(containerfile.read_text) if containerfile else None
    agent = await builder.agent_image(text, on_line=_print)
    print(f"agent image: {agent.tag}", flush=True)
    proxy = await builder.proxy_image(on_line=_print)
    print(f"proxy image: {proxy.tag}", flush=True)


async def bootstrap(settings: SandboxSettings, state_dir: Path, *, force: bool) -> None:
    service, _ = _parts(settings, state_dir)
    await service.check()
    # bootstrap_base's own lines name the image ("... exists" or "podman import -> ..."); a
    # "base image:" line here would repeat it, and `image build` prints that one.
    await bootstrap_base(service, _print, force=force)
