"""The podman calls the sandbox makes about its own containers, each with the error
handling the sandbox wants: inspect (None when gone), list this deployment's agent
containers, a call whose failure is one clear SandboxUnavailable with a hint, a quiet exec,
ending stray processes from the host, and a container's memory and creation time."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import re
from typing import Any

from podman.errors import NotFound

from gateway_bot.sandbox.base import SandboxUnavailable
from gateway_bot.sandbox.podman import strays
from gateway_bot.sandbox.podman.cli_call import PodmanCommandError
from gateway_bot.sandbox.podman.proxy import LABEL_DEPLOYMENT, LABEL_ROLE
from gateway_bot.sandbox.podman.service import API_ERRORS, PodmanService, api_error_text

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

    async def our_containers_listed(self) -> list[dict[str, Any]]:
        """``our_containers`` when the local REST service does not answer (``chat`` ended
        and stopped the one it started; ``gateway-bot status`` runs without a daemon): the
        podman CLI lists them from the storage itself, starting no service."""
        if self._service.url is not None or await self._service.answers():
            return await self.our_containers()
        listed = await self._service.cli(
            "ps", "--all", "--format", "json",
            "--filter", f"label={LABEL_DEPLOYMENT}={self._deployment}",
            timeout_s=60,
        )  # fmt: skip
        infos = [dict(info) for info in json.loads(listed.stdout or "[]")]
        return [info for info in infos if (info.get("Labels") or {}).get(LABEL_ROLE) == "agent"]

    async def memory(self, name: str) -> int | None:
        """Bytes in use now, from podman's stats (one sample, not a stream); None when the
        container is not running or podman does not say."""

        def call(client: Any) -> Any:
            return client.containers.get(name).stats(stream=False, decode=True)

        try:
            stats = await self._service.api(call)
        except API_ERRORS as exc:
            log.debug("no stats for %s: %s", name, exc)
            return None
        samples = stats.get("Stats") if isinstance(stats, dict) else None
        if not samples or not isinstance(samples[0], dict):
            return None
        usage = samples[0].get("MemUsage")
        return usage if isinstance(usage, int) and usage > 0 else None

    async def remove(self, name: str) -> None:
        await self._service.remove_container(name)

    async def start(self, name: str) -> None:
        try:
            await self._service.start_container(name)
        except API_ERRORS as exc:
            hinted = self._service.explain(with_hint(exc))
            raise SandboxUnavailable(f"podman could not start {name}: {hinted}") from exc

    async def call(self, call: Any, what: str) -> None:
        try:
            await self._service.api(call)
        except API_ERRORS as exc:
            hinted = self._service.explain(with_hint(exc))
            raise SandboxUnavailable(f"podman could not {what}: {hinted}") from exc

    async def kill_strays(
        self, name: str, info: dict[str, Any] | None = None, *, keep_exec: str | None = None
    ) -> None:
        """Every process of the container but its init ends (``strays.py``: from the host,
        never with the container's own binaries, which the agent can replace); with
        ``keep_exec``, the process of the exec carrying that run mark is spared too."""
        info = info or await self.inspect(name)
        if info is None or not info["State"]["Running"]:
            return
        if not self._service.is_local:
            # Its PIDs are another machine's: never looked up in this one's /proc. Without a
            # process table to sweep, the container is restarted (its init alone survives a
            # stop), which a warm session's process (``keep_exec``) would not survive.
            if keep_exec is None:
                log.info("restarting %s on %s to end its processes", name, self._service.host)
                await self._service.api(lambda c: c.containers.get(name).restart(timeout=5))
            else:
                log.warning("cannot end background processes in %s on a remote host", name)
            return
        await self.kill_strays_of_init(name, int(info["State"]["Pid"]), keep_exec=keep_exec)

    async def kill_strays_of_init(
        self, name: str, init_pid: int, *, keep_exec: str | None = None
    ) -> None:
        """``kill_strays`` on this machine for the container whose init is ``init_pid``
        (known already: no inspect). ``strays`` checks that PID is still an init."""
        killed = await asyncio.to_thread(strays.kill_all_but_init, init_pid, keep_exec)
        if killed:
            log.info("ended %d stray process(es) in %s", killed, name)

    async def kill_strays_in_all(self, running: list[dict[str, Any]]) -> None:
        """``kill_strays`` for every container of ``running`` (entries of
        ``our_containers``, whose ``Pid`` is each init's): one sweep of /proc for them all on
        this machine (``strays.kill_all_but_inits``); another machine's one by one."""
        if not self._service.is_local:
            for info in running:
                await self.kill_strays(info["Names"][0])
            return
        pids = [int(info["Pid"]) for info in running if info.get("Pid")]
        killed = await asyncio.to_thread(strays.kill_all_but_inits, pids)
        if killed:
            log.info("ended %d stray process(es) in %d container(s)", killed, len(pids))

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


def created_at(info: dict[str, Any]) -> float | None:
    """Podman's REST list says ``Created`` as RFC 3339 with nanoseconds, its CLI as seconds."""
    value = info.get("Created")
    if isinstance(value, int | float):
        return float(value) if value > 0 else None
    if not isinstance(value, str):
        return None
    found = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", value)
    if found is None:
        return None
    fraction = (found.group(2) or "")[:7]
    zone = "+00:00" if found.group(3) == "Z" else found.group(3)
    try:
        return datetime.datetime.fromisoformat(found.group(1) + fraction + zone).timestamp()
    except ValueError:
        return None
