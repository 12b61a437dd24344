"""The podman calls the sandbox makes about its own containers, each with the error
handling the sandbox wants: inspect (None when gone), list this deployment's agent
containers, a call whose failure is one clear SandboxUnavailable with a hint, a quiet exec,
and ending stray processes from the host."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from podman.errors import NotFound, PodmanError

from gateway_bot.sandbox.base import SandboxUnavailable
from gateway_bot.sandbox.podman import strays
from gateway_bot.sandbox.podman.proxy import LABEL_DEPLOYMENT, LABEL_ROLE
from gateway_bot.sandbox.podman.service import PodmanCommandError, PodmanService, api_error_text

log = logging.getLogger(__name__)


class ContainerCalls:
    def __init__(self, service: PodmanService, deployment: str) -> None:
        self._service = service
        self._deployment = deployment

    async def inspect(self, name: str) -> dict[str, Any] | None:
        def call(client: Any) -> dict[str, Any] | None:
            try:
                return dict(client.containers.get(name).attrs)
            except NotFound:
                return None

        return await self._service.api(call)

    async def our_containers(self) -> list[dict[str, Any]]:
        """This deployment's agent containers (running or not), as podman lists them."""
        # One label per filter: podman-py turns a list of labels into one garbled string.
        filters = {"label": f"{LABEL_DEPLOYMENT}={self._deployment}"}
        found = await self._service.api(lambda c: c.containers.list(all=True, filters=filters))
        infos = [dict(container.attrs) for container in found]
        return [info for info in infos if (info.get("Labels") or {}).get(LABEL_ROLE) == "agent"]

    async def remove(self, name: str) -> None:
        await self._service.remove_container(name)

    async def call(self, call: Any, what: str) -> None:
        try:
            await self._service.api(call)
        except PodmanError as exc:
            raise SandboxUnavailable(f"podman could not {what}: {with_hint(exc)}") from exc

    async def kill_strays(
        self, name: str, info: dict[str, Any] | None = None, *, keep_exec: str | None = None
    ) -> None:
        """Every process of the container but its init ends (``strays.py``: from the host,
        never with the container's own binaries, which the agent can replace); with
        ``keep_exec``, the process of the exec carrying that run mark is spared too."""
        info = info or await self.inspect(name)
        if info is None or not info["State"]["Running"]:
            return
        init_pid = int(info["State"]["Pid"])
        killed = await asyncio.to_thread(strays.kill_all_but_init, init_pid, keep_exec)
        if killed:
            log.info("ended %d stray process(es) in %s", killed, name)

    async def exec_quietly(self, name: str, argv: list[str]) -> None:
        """Run ``argv`` in the container, logging a failure. Through the CLI, never the
        REST API: podman 4.3's service leaves the conmon of every exec it ran alive, and
        that conmon keeps the container's shm busy, so a later remove fails or hangs."""
        try:
            await self._service.cli("exec", name, *argv, timeout_s=120)
        except (PodmanCommandError, TimeoutError) as exc:
            log.warning("%s in %s failed: %s", argv[-1], name, exc)


def with_hint(exc: BaseException) -> str:
    text = api_error_text(exc)
    if "rlimit" in text:
        text += " (hint: set sandbox.podman.ulimits to limits this host allows)"
    elif "crun" in text or "cgroup" in text:
        text += " (hint: set sandbox.podman.runtime: runc)"
    return text
