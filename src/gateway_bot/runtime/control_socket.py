"""The running daemon's control socket: how ``gateway-bot approve|deny`` reaches it.

The daemon owns the state database and everything a decision sets off (releasing the held
messages into its scheduler, editing the card in chat), so a shell decision is not written
into the database behind its back: the command asks the daemon, over a Unix socket in
``<state_dir>/control/`` (directory 0700, socket 0600, and the peer's uid checked with
``SO_PEERCRED``: only the daemon's own user gets in), and the daemon decides through
``Application.decide_approval`` exactly as the dashboard and a card's button do. The owners'
list still decides who may: ``--as`` names an identity, it grants nothing.

One request per connection, one JSON line each way:
``{"op": "decide", "code": ..., "choice": "allow"|"deny", "as": ...}`` ->
``{"ok": bool, "text": ...}``. A daemon that is not running cannot be asked; the command
says so (decide from chat or start the daemon): decisions are never queued for later.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gateway_bot.core.application import Application
from gateway_bot.domain.records import ApprovalState

log = logging.getLogger(__name__)

REQUEST_LIMIT = 64 * 1024
READ_TIMEOUT_S = 10.0
ANSWER_TIMEOUT_S = 120.0
"""A decision edits the card in chat (with retries): the shell waits that long at most."""


class DaemonUnreachable(RuntimeError):
    """No daemon answers on this state directory's control socket."""


def socket_path(state_dir: Path) -> Path:
    return state_dir / "control" / "daemon.sock"


class ControlServer:
    """Started by the daemon after its service; stopped before it shuts down."""

    def __init__(self, application: Application, state_dir: Path) -> None:
        self.application = application
        self.path = socket_path(state_dir)
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Raises OSError when the socket cannot be made (path too long, another live
        daemon on this state directory)."""
        await asyncio.to_thread(_prepare, self.path)
        with _addressable(self.path) as address:
            self._server = await asyncio.start_unix_server(
                self._serve, path=address, limit=REQUEST_LIMIT
            )
        await asyncio.to_thread(os.chmod, self.path, 0o600)
        log.info("control socket at %s", self.path)

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        await self._server.wait_closed()
        self._server = None
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(self.path.unlink)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if not _same_user(writer):
                answer = {"ok": False, "text": "Only the daemon's own user may use this socket."}
            else:
                line = await asyncio.wait_for(reader.readline(), READ_TIMEOUT_S)
                answer = await self._answer(json.loads(line))
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        except (OSError, ValueError, TimeoutError, asyncio.LimitOverrunError) as exc:
            log.warning("control socket request failed: %s", exc)
        except Exception:
            log.exception("control socket request failed")
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _answer(self, request: Any) -> dict[str, Any]:
        if not isinstance(request, dict) or request.get("op") != "decide":
            return {"ok": False, "text": "Unknown request."}
        code, choice, owner = request.get("code"), request.get("choice"), request.get("as")
        if not isinstance(code, str) or not isinstance(owner, str) or not code or not owner:
            return {"ok": False, "text": "A decision needs a code and --as."}
        if choice not in ("allow", "deny"):
            return {"ok": False, "text": "A decision is allow or deny."}
        if not self.application.decides_somewhere(owner):
            # Before the code is looked up: whether it exists (or was decided) is not for
            # someone who may decide nothing, so they get this line either way.
            log.warning("refused a shell decision on %s as %s: not an owner or admin", code, owner)
            return {
                "ok": False,
                "text": f"{owner} is not an owner or admin of this bot: nothing was decided.",
            }
        approval = await self.application.approval(code)
        if approval is None:
            return {"ok": False, "text": f"There is no approval {code}."}
        if approval.state is not ApprovalState.PENDING:
            return {"ok": False, "text": f"Approval {code} was already {approval.state.value}."}
        log.info("approval %s decided from the shell: %s as %s", code, choice, owner)
        line = await self.application.decide_approval(
            code, choice, channel=approval.channel, decider_id=owner
        )
        if line is None:
            return {
                "ok": False,
                "text": f"{owner} is not an owner or admin on {approval.channel}: "
                "nothing was decided.",
            }
        after = await self.application.approval(code)
        return {"ok": after is not None and after.decided_by == owner, "text": line}


def _prepare(path: Path) -> None:
    """The socket's directory, private; a stale socket of a dead daemon removed, a live
    daemon's left alone (OSError)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    if not path.exists() and not path.is_symlink():
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with _addressable(path) as address:
            probe.connect(address)
    except OSError:
        path.unlink()  # nobody listens: a daemon that died without cleaning up
        return
    finally:
        probe.close()
    raise OSError(f"another daemon already listens on {path}")


SUN_PATH_MAX = 107
"""A Unix socket's address holds at most this many bytes (108 with the NUL)."""


@contextlib.contextmanager
def _addressable(path: Path) -> Iterator[str]:
    """An address for ``path`` that fits a socket address: itself, or for a deep state
    directory the same file named through an open descriptor of its directory
    (``/proc/self/fd/N/daemon.sock``, which the kernel resolves like any path)."""
    if len(os.fsencode(path)) <= SUN_PATH_MAX:
        yield str(path)
        return
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{directory}/{path.name}"
    finally:
        os.close(directory)


def _same_user(writer: asyncio.StreamWriter) -> bool:
    sock = writer.get_extra_info("socket")
    if sock is None:
        return False
    credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", credentials)
    return bool(uid == os.getuid())


def ask_daemon(state_dir: Path, request: dict[str, Any]) -> dict[str, Any]:
    """Send one request to the daemon of ``state_dir`` (blocking: the CLI's side).
    Raises DaemonUnreachable when none answers."""
    path = socket_path(state_dir)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(ANSWER_TIMEOUT_S)
        try:
            with _addressable(path) as address:
                client.connect(address)
        except OSError as exc:  # missing, refused, or a state_dir that is no directory
            raise DaemonUnreachable(f"no daemon answers at {path} ({exc.strerror})") from exc
        client.sendall(json.dumps(request).encode() + b"\n")
        received = b""
        while not received.endswith(b"\n"):
            chunk = client.recv(65536)
            if not chunk:
                break
            received += chunk
    if not received:
        raise DaemonUnreachable(f"the daemon at {path} closed the connection unanswered")
    answer = json.loads(received)
    if not isinstance(answer, dict):
        raise DaemonUnreachable(f"the daemon at {path} answered {answer!r}")
    return answer
