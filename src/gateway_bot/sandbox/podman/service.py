"""The two ways the sandbox talks to podman: podman-py against the REST service socket, and
the podman CLI (argv lists) for what podman-py lacks.

podman-py covers containers, networks and image queries. The CLI is used where podman-py
falls short (decisions 0019 and 0106 say why): ``podman exec -i`` streams a process's stdin and
stdout for an ``ssh://`` host (podman-py's ``exec_run`` cannot feed stdin; a local socket's
service runs tasks through ``api_exec.py``), ``podman build`` shows progress while it
runs (podman-py returns the log only at the end), and ``podman import`` has no podman-py call.

The service is podman's own ``podman system service``; when nothing answers on the socket,
the daemon starts one (``service_process.py``), which outlives the daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from podman import PodmanClient
from podman.errors import APIError, NotFound, PodmanError
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_fixed

from gateway_bot.config.sandbox import PodmanSettings
from gateway_bot.sandbox.base import HostUnreachable, SandboxUnavailable
from gateway_bot.sandbox.podman.cli_call import CliResult, OnLine, PodmanCommandError, run_cli
from gateway_bot.sandbox.podman.service_process import ServiceProcess
from gateway_bot.sandbox.podman.ssh_tunnel import SshTunnel

log = logging.getLogger(__name__)

INIT_ON_HOST = Path("/usr/local/libexec/gateway-bot/init")
"""The project's own init (``init.c``, built static by scripts/setup.sh), mounted read-only
as every agent container's PID 1 (``containers.INIT_COMMAND``). Not podman's catatonit:
that one is dumpable, and the agent could take it over (``init.c`` says how)."""

T = TypeVar("T")

_MISSING_SOURCE = re.compile(r"statfs (/\S+): no such file or directory")
"""Podman's words for a bind mount whose source is not on its machine."""

ANSWERED_RECENTLY_S = 5.0
"""``ensure_running`` takes a service that answered this recently as running: far below its
idle exit (``service_process.SERVICE_IDLE_SECONDS``); one that died meanwhile fails the
next exec, which then asks again (``PodmanSandbox._repair_died``)."""
_HOST_ENV = (
    "PATH",
    "HOME",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "TMPDIR",
    "CONTAINERS_CONF",
    "CONTAINERS_STORAGE_CONF",
    "CONTAINERS_REGISTRIES_CONF",
)
"""What the podman CLI needs from the daemon's environment; nothing else is passed."""


def default_socket() -> Path:
    """Where podman itself puts its service socket."""
    if os.geteuid() == 0:
        return Path("/run/podman/podman.sock")
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    return Path(runtime_dir) / "podman" / "podman.sock"


def resolve_runtime(setting: str | None) -> str | None:
    """'auto' -> runc on cgroup-hybrid hosts (crun refuses them), else podman's default."""
    if setting != "auto":
        return setting
    hybrid = Path("/sys/fs/cgroup/unified").is_dir()
    return "runc" if hybrid and shutil.which("runc") else None


class PodmanService:
    def __init__(
        self,
        settings: PodmanSettings,
        log_dir: Path,
        *,
        url: str | None = None,
        host: str = "local",
        ssh_identity: Path | None = None,
        ssh_known_hosts: Path | None = None,
    ) -> None:
        """``url`` set: a configured host's REST service (``unix://`` or ``ssh://``), which
        someone else runs: the daemon never starts it, and the CLI talks to it remotely
        (``podman --remote --url``). Unset: the local service at ``settings.socket``. An
        ``ssh://`` host is reached through the daemon's own SSH connection (``ssh_tunnel``:
        its host key checked against ``ssh_known_hosts``, ``ssh_identity`` the key)."""
        self.command = settings.command
        self.executable = shutil.which(settings.command) or settings.command
        """Resolved once, from the daemon's own PATH: podman always runs by absolute path."""
        self.host = host
        self.url = url
        self.socket = (
            Path(url.removeprefix("unix://"))
            if url is not None and url.startswith("unix://")
            else settings.socket or default_socket()
        )
        self.base_url = url or f"unix://{self.socket}"
        self._tunnel = (
            SshTunnel(url, ssh_identity, ssh_known_hosts, log_dir)
            if url is not None and url.startswith("ssh://")
            else None
        )
        self._cli_prefix: list[str] | None = [self.executable] if url is None else None
        """argv start of every podman CLI call for this host (``cli_prefix``)."""
        self.is_local = url is None or url.startswith("unix://")
        """Runs on this machine: its containers' processes are in this machine's /proc."""
        auto_elsewhere = not self.is_local and settings.runtime == "auto"
        self.runtime = None if auto_elsewhere else resolve_runtime(settings.runtime)
        """'auto' is judged on this machine; another one's service keeps its own default."""
        self.ulimits = dict(settings.ulimits)
        self._process = ServiceProcess(self.executable, self.runtime, self.socket, log_dir)
        """The local service's process, when nothing answers on the socket (``url`` unset)."""
        self._start_lock = asyncio.Lock()
        self._answered_at = -ANSWERED_RECENTLY_S
        """When it last answered (``note_answer``, a ping), on the monotonic clock."""

    @property
    def tunnel(self) -> SshTunnel | None:
        """The daemon's SSH connection to an ``ssh://`` host (None for any other)."""
        return self._tunnel

    # -- settings as podman wants them ---------------------------------------------------

    def api_ulimits(self) -> list[dict[str, Any]]:
        limits = []
        for name, value in self.ulimits.items():
            soft, _, hard = str(value).partition(":")
            limits.append({"Name": name, "Soft": int(soft), "Hard": int(hard or soft)})
        return limits

    def cli_limit_flags(self) -> list[str]:
        # A remote CLI has no --runtime on run or build: its service's runtime applies.
        flags = [f"--runtime={self.runtime}"] if self.runtime and self.is_local else []
        for name, value in self.ulimits.items():
            flags += ["--ulimit", f"{name}={value}"]
        return flags

    def cli_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The podman CLI's environment: the named variables of the daemon's own environment
        plus ``extra`` (never anything a repo or the agent chose)."""
        env = {key: os.environ[key] for key in _HOST_ENV if key in os.environ}
        env.update(extra or {})
        return env

    async def cli_prefix(self) -> list[str]:
        """argv start of a podman CLI call for this host. A service on this machine: the
        local CLI on the service's own storage (asked of the service once), so ``exec`` is
        the CLI's, as for the default service (podman 4.3's service leaves the conmon of
        every exec it runs alive). Another machine's: ``podman --remote --url``."""
        if self._cli_prefix is None:
            assert self.url is not None
            if self.is_local:
                store = (await self.api(_info)).get("store") or {}
                prefix = [self.executable, "--root", str(store["graphRoot"])]
                prefix += ["--runroot", str(store["runRoot"])]
                prefix += ["--storage-driver", str(store["graphDriverName"])]
                for key, value in (store.get("graphOptions") or {}).items():
                    if isinstance(value, str):
                        prefix += ["--storage-opt", f"{key}={value}"]
                self._cli_prefix = prefix
            else:
                self._cli_prefix = [self.executable, "--remote", "--url", self._api_url()]
        return self._cli_prefix

    # -- availability ---------------------------------------------------------------------

    async def check(self) -> None:
        """One clear SandboxUnavailable when podman is missing, broken or has no service."""
        if shutil.which(self.command) is None:
            raise SandboxUnavailable(
                f"podman was not found (sandbox.podman.command is {self.command!r}). Install "
                "it (apt-get install podman runc conmon slirp4netns fuse-overlayfs uidmap, or "
                "run scripts/setup.sh), or set `sandbox: {kind: none}` to run the agent "
                "unconfined on this host."
            )
        if self.is_local and not await asyncio.to_thread(INIT_ON_HOST.is_file):
            raise SandboxUnavailable(
                f"{INIT_ON_HOST} is missing: gateway-bot's init is every agent container's "
                "PID 1. Build it with scripts/setup.sh (as root; it needs gcc and libc6-dev)."
            )
        if await self._reach():
            # Its service answers; the CLI (every exec goes through it) must run too, which
            # `--version` shows without `podman info`'s seconds on a loaded machine.
            try:
                await self.cli("--version", timeout_s=60)
            except (PodmanCommandError, TimeoutError) as exc:
                raise SandboxUnavailable(f"podman does not work here: {exc}") from exc
            return
        if self.url is not None:
            raise HostUnreachable(self.host, self.url)
        try:
            result = await self.cli("info", "--format", "{{.Host.OCIRuntime.Name}}", timeout_s=60)
        except (PodmanCommandError, TimeoutError) as exc:
            raise SandboxUnavailable(f"podman does not work here: {exc}") from exc
        log.debug("podman works (runtime %s)", result.stdout.strip())
        await self.ensure_running()

    async def ensure_running(self) -> None:
        """Make sure the REST service answers; start it when nothing does. A configured
        host's service is never started here: HostUnreachable when it does not answer.
        Not asked again within ``ANSWERED_RECENTLY_S`` of its last answer (every task calls
        this; a restart runs dozens at once)."""
        if self.url is None and time.monotonic() - self._answered_at < ANSWERED_RECENTLY_S:
            return  # (a configured host is always asked: one down makes its tasks wait)
        if await self._reach():
            return
        if self.url is not None:
            raise HostUnreachable(self.host, self.url)
        async with self._start_lock:
            if await self._answers():
                return
            await self._process.start(self.cli_env(), self._answers)

    async def answers(self) -> bool:
        """Does the REST service answer now? (Always asked: a False also makes the next
        ``ensure_running`` ask again.)"""
        return await self._reach()

    def note_answer(self) -> None:
        """The service just did what it was asked (an exec through it started)."""
        self._answered_at = time.monotonic()

    async def _reach(self) -> bool:
        """``_answers``, after (re)connecting an ``ssh://`` host's tunnel that is down."""
        if await self._answers():
            return True
        return self._tunnel is not None and await self._tunnel.connect(self._answers)

    async def _answers(self) -> bool:
        self._answered_at = -ANSWERED_RECENTLY_S
        if self.base_url.startswith("unix://") and not self.socket.exists():
            return False
        if self._tunnel is not None and not self._tunnel.is_up():
            return False
        try:
            answered = bool(await self.api(lambda client: client.ping()))
        except (PodmanError, OSError):
            return False
        if answered:
            self.note_answer()
        return answered

    async def stop_if_started_here(self) -> None:
        """End the service this process started (``ServiceProcess.stop_if_started_here``):
        ``chat`` leaves nothing running."""
        await self._process.stop_if_started_here()

    async def close(self) -> None:
        """End this host's SSH connection, if it has one (nothing else runs here)."""
        if self._tunnel is not None:
            await self._tunnel.close()

    def explain(self, text: str) -> str:
        """``text`` (podman's refusal), with the likely cause when this host is another
        machine that does not see a path of the daemon's (a bind mount's source): the state
        directory must be shared at the same path (decision 0130)."""
        missing = _MISSING_SOURCE.search(text)
        if self.is_local or missing is None:
            return text
        return (
            f"{text} (host {self.host} does not see {missing[1]}: a host on another machine "
            "needs the daemon's state directory at the same path, shared storage)"
        )

    def _api_url(self) -> str:
        """Where the REST calls go: an ``ssh://`` host's forwarded socket on this machine."""
        return f"unix://{self._tunnel.socket}" if self._tunnel is not None else self.base_url

    # -- calls ----------------------------------------------------------------------------

    async def api(self, call: Callable[[PodmanClient], T]) -> T:
        """Run a blocking podman-py call on a thread, with a client of its own (a requests
        session is not meant to be shared between threads)."""

        def run() -> T:
            with PodmanClient(base_url=self._api_url(), timeout=120) as client:
                return call(client)

        return await asyncio.to_thread(run)

    async def remove_container(self, name: str) -> None:
        """Remove the container, running or not (gone already is fine). Podman 4.3 refuses
        now and then with "device or resource busy" on the container's shm right after an
        exec ended: that is retried, a few times, half a second apart."""

        def remove(client: PodmanClient) -> None:
            with contextlib.suppress(NotFound):
                client.containers.get(name).remove(force=True)

        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(6),
            wait=wait_fixed(0.5),
            retry=retry_if_exception(lambda exc: "resource busy" in str(exc)),
            reraise=True,
        ):
            with attempt:
                await self.api(remove)

    async def start_container(self, name: str) -> None:
        """Start the container (running already is fine). Netavark, setting up the
        container's networks, now and then fails with "No such file or directory" on a busy
        host (seen in CI: four starts within minutes, each test passing when run again): a
        server error is tried again, a few times, a second apart, before it is the task's."""
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(4),
            wait=wait_fixed(1.0),
            retry=retry_if_exception(_server_error),
            reraise=True,
        ):
            with attempt:
                await self.api(lambda client: client.containers.get(name).start())

    async def cli(
        self,
        *args: str,
        on_line: OnLine | None = None,
        timeout_s: float | None = None,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> CliResult:
        """Run ``podman ARGS`` on this host (``cli_call.run_cli``); with ``on_line`` every
        output line is passed on as it comes (build progress). Raises PodmanCommandError on
        a non-zero exit when ``check``."""
        prefix = await self.cli_prefix()
        return await run_cli(
            prefix, args, self.cli_env(env), on_line=on_line, timeout_s=timeout_s, check=check
        )


API_ERRORS: tuple[type[Exception], ...] = (PodmanError, APIError)
"""What a podman-py call raises when the service refuses: its APIError (NotFound, the
500s) is no PodmanError, so ``except PodmanError`` alone let a refusal through as an
"Internal error" instead of the sandbox's own message."""


def _server_error(exc: BaseException) -> bool:
    return isinstance(exc, APIError) and exc.is_server_error()


def _info(client: Any) -> dict[str, Any]:
    return dict(client.info())


def api_error_text(exc: BaseException) -> str:
    """podman-py errors carry the service's explanation; that is what a user needs."""
    if isinstance(exc, APIError) and exc.explanation:
        return str(exc.explanation)
    return str(exc)
