"""The daemon's own SSH connection to a Podman host configured as ``ssh://``.

One OpenSSH client per host forwards a unix socket of the daemon's (in a 0700 directory of
its own) to the host's Podman socket; every REST call and every ``podman --remote`` CLI
call of that host then goes through that local socket, as for a service on this machine.

Why not podman-py's and podman's own SSH support (decision 0130): podman-py starts
``ssh -o "StrictHostKeyChecking no"`` per connection, so whoever answers on the host's
address gets the Podman API's calls, and podman 4.3's CLI adds an unknown host's key
without asking. The API of a host's Podman is root on that host and decides what runs
in every conversation's container: the host's key must be checked. Here it is, always
(``StrictHostKeyChecking yes`` against ``known_hosts``, ``BatchMode``: never a prompt),
with the configured ``identity``; an unknown or changed key is the host being
unreachable, with ssh's own words in the log.

The client is the daemon's child, killed with it (``setpriv --pdeathsig``): containers
never depend on it (conmon supervises them on their host), and the next daemon connects
again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import stat
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from gateway_bot.sandbox.child import kill_group

log = logging.getLogger(__name__)

SOCKET_PATH_MAX = 100
"""A unix socket's path must fit in 108 bytes (``sun_path``); some margin."""

CONNECT_TIMEOUT_S = 20.0
"""How long a connection (the forwarded socket answering) may take before the host counts
as unreachable for this attempt."""


class SshTunnel:
    """``ssh -N -L LOCAL:REMOTE`` to the host of ``url`` (``ssh://USER@HOST[:PORT]/PATH``)."""

    def __init__(
        self, url: str, identity: Path | None, known_hosts: Path | None, directory: Path
    ) -> None:
        """``directory``: the daemon's own directory for this host; the forwarded socket
        goes in its ``ssh`` subdirectory (0700), or in a temporary one when that path is too
        long for a unix socket."""
        parts = urlsplit(url)
        if parts.scheme != "ssh" or not parts.hostname or not parts.path:
            raise ValueError(f"not an ssh://USER@HOST[:PORT]/PATH URL: {url}")
        self._destination = (
            f"{parts.username}@{parts.hostname}" if parts.username else parts.hostname
        )
        self._port = parts.port
        self._remote_path = parts.path
        self._identity = identity
        self._known_hosts = known_hosts
        self._home = directory / "ssh"
        self._directory: Path | None = None
        """0700, made at the first connection: nobody else on this machine reaches the
        forwarded socket."""
        self._process: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self.last_error = ""
        """ssh's last words when a connection failed (the host key refused, ...)."""

    @property
    def socket(self) -> Path:
        """The forwarded socket, on this machine."""
        if self._directory is None:
            home = self._home
            if len(str(home / "podman.sock")) >= SOCKET_PATH_MAX:
                # Too long for a socket: a short directory named after the long one, the
                # same at every start (none is left behind per run).
                digest = hashlib.sha256(str(home).encode()).hexdigest()[:16]
                runtime = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
                home = Path(runtime) / f"gwb-ssh-{digest}"
            self._directory = _private_directory(home)
        return self._directory / "podman.sock"

    def argv(self) -> list[str]:
        return self._ssh(["-L", f"{self.socket}:{self._remote_path}"])

    def reverse_argv(self, remote: str, local: Path) -> list[str]:
        """A second client forwarding ``remote`` (a socket it makes on the host) back to
        ``local`` here, with the same checks and key (``asks_forward``)."""
        return self._ssh(["-R", f"{remote}:{local}"])

    def _ssh(self, forward: list[str]) -> list[str]:
        argv = ["setpriv", "--pdeathsig", "KILL", "--", "ssh", "-N", "-T"]
        options = {
            "BatchMode": "yes",
            "StrictHostKeyChecking": "yes",
            "ExitOnForwardFailure": "yes",
            "StreamLocalBindUnlink": "yes",
            "ServerAliveInterval": "15",
            "ServerAliveCountMax": "3",
            "ConnectTimeout": str(int(CONNECT_TIMEOUT_S)),
            "ControlMaster": "no",
            "ControlPath": "none",
        }
        if self._known_hosts is not None:
            options["UserKnownHostsFile"] = str(self._known_hosts)
            options["GlobalKnownHostsFile"] = "/dev/null"
        if self._identity is not None:
            options["IdentitiesOnly"] = "yes"
            argv += ["-i", str(self._identity)]
        for key, value in options.items():
            argv += ["-o", f"{key}={value}"]
        if self._port is not None:
            argv += ["-p", str(self._port)]
        return [*argv, *forward, "--", self._destination]

    def is_up(self) -> bool:
        return self._process is not None and self._process.returncode is None

    async def connect(self, answers: Callable[[], Awaitable[bool]]) -> bool:
        """Connect (again, when the last connection ended) and say whether the host's
        service answers through it (``answers``). False: unreachable now; ``last_error``
        has ssh's reason."""
        async with self._lock:
            if self.is_up() and await answers():
                return True
            await self._end()
            with contextlib.suppress(FileNotFoundError):
                self.socket.unlink()
            self._process = await start_client(self.argv())
            deadline = time.monotonic() + CONNECT_TIMEOUT_S
            while time.monotonic() < deadline:
                if self._process.returncode is not None:
                    break
                if self.socket.exists() and await answers():
                    self.last_error = ""
                    return True
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._process.wait(), 0.1)
            await self._end()
            return False

    async def _end(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if words := await end_client(process):
            self.last_error = words
            log.warning("ssh to %s ended: %s", self._destination, self.last_error)

    async def close(self) -> None:
        async with self._lock:
            await self._end()
            if self._directory is not None:
                with contextlib.suppress(FileNotFoundError):
                    self.socket.unlink()
                if self._directory != self._home:  # the short one outside the daemon's
                    with contextlib.suppress(OSError):
                        self._directory.rmdir()
                self._directory = None


def _private_directory(path: Path) -> Path:
    """``path`` as a directory only this user reaches (0700, ours, not a link): made when
    missing; anything else there (someone else's, in a shared /tmp) is refused."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    found = os.lstat(path)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid():
        raise OSError(f"{path} is not a directory of this user's: the ssh socket is not put there")
    os.chmod(path, 0o700)
    return path


async def start_client(argv: Sequence[str]) -> asyncio.subprocess.Process:
    """An ssh client in a group of its own (``end_client`` ends the group), its stderr kept
    for why it ended."""
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )


async def end_client(process: asyncio.subprocess.Process) -> str:
    """End an ssh client (its group, if it still runs), reap it, and return the last lines
    it wrote to stderr ("" for none): why a connection or a forward ended."""
    if process.returncode is None:
        kill_group(process)
    await process.wait()
    if process.stderr is None:
        return ""
    words = (await process.stderr.read()).decode(errors="replace").strip()
    return " / ".join(words.splitlines()[-3:])
