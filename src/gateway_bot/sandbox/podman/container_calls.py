"""The podman calls the sandbox makes about its own containers, each with the error
handling the sandbox wants: inspect (None when gone), list this deployment's agent
containers, a call whose failure is one clear SandboxUnavailable with a hint, a quiet exec,
and ending stray processes from the host."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from podman.errors import NotFound, PodmanError
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_fixed

from gateway_bot.sandbox.base import SandboxUnavailable
from gateway_bot.sandbox.podman import strays
from gateway_bot.sandbox.podman.proxy import LABEL_DEPLOYMENT, LABEL_ROLE
from gateway_bot.sandbox.podman.service import PodmanService, api_error_text

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
        """Remove the container (gone already is fine). Podman 4.3 refuses now and then
        with "device or resource busy" on the container's shm right after an exec ended:
        that is retried, a few times, half a second apart."""

        def remove(client: Any) -> None:
            with contextlib.suppress(NotFound):
                client.containers.get(name).remove(force=True)

        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(6),
            wait=wait_fixed(0.5),
            retry=retry_if_exception(lambda exc: "resource busy" in str(exc)),
            reraise=True,
        ):
            with attempt:
                await self._service.api(remove)

    async def call(self, call: Any, what: str) -> None:
        try:
            await self._service.api(call)
        except PodmanError as exc:
            raise SandboxUnavailable(f"podman could not {what}: {with_hint(exc)}") from exc

    async def kill_strays(self, name: str, info: dict[str, Any] | None = None) -> None:
        """Every process of the container but its init ends (``strays.py``: from the host,
        never with the container's own binaries, which the agent can replace)."""
        info = info or await self.inspect(name)
        if info is None or not info["State"]["Running"]:
            return
        killed = await asyncio.to_thread(strays.kill_all_but_init, int(info["State"]["Pid"]))
        if killed:
            log.info("ended %d stray process(es) in %s", killed, name)

    async def exec_quietly(self, name: str, argv: list[str]) -> None:
        def call(client: Any) -> None:
            with contextlib.suppress(NotFound):
                client.containers.get(name).exec_run(argv)

        try:
            await self._service.api(call)
        except PodmanError as exc:
            log.warning("%s in %s failed: %s", argv[-1], name, api_error_text(exc))


def with_hint(exc: BaseException) -> str:
    text = api_error_text(exc)
    if "rlimit" in text:
        text += " (hint: set sandbox.podman.ulimits to limits this host allows)"
    elif "crun" in text or "cgroup" in text:
        text += " (hint: set sandbox.podman.runtime: runc)"
    return text
