"""One task's process in a container, run through the Podman REST service.

Why not the ``podman exec -i`` CLI (``process.py``): each CLI call costs 160-250 ms of
podman start-up (1.5 s for 8 at once on two cores), and a restart re-runs every queued task
through it. The service is running anyway; an exec through it costs ~100 ms. podman-py's
``exec_run`` cannot feed the process's stdin (prompts and a warm session's turns go
there), so the daemon speaks the API itself, in three steps, each with a timeout:

1. ``POST /libpod/containers/NAME/exec`` (aiohttp) creates the session. The variables go
   in its JSON body: never in argv (every host user can read it) nor in any host
   process's environment, and a value arrives byte for byte (line breaks, ``=``,
   non-ASCII): no file to parse, so no line to inject.
2. ``POST /libpod/exec/ID/start`` on a raw unix connection asks for an upgrade
   (``101 UPGRADED``); the connection then carries the process's stdin one way (half-close
   is its end of file) and its output the other, as frames: an 8-byte header (stream 1
   stdout, 2 stderr; 3 zero bytes; big-endian length) and the bytes. They are taken apart
   into ``stdout`` (a StreamReader with the CLI path's line limit; reading the connection
   pauses while it holds more than twice that, as a pipe would) and stderr (the first
   ``STDERR_LIMIT`` bytes kept, the rest read and dropped).
3. After the stream ends, ``GET /libpod/exec/ID/json`` gives the exit code.

Semantics are the CLI path's: killing the connection does not end the process inside, so
``kill`` closes it and the after-exit step clears the container (``after_exit(killed)``);
a daemon that dies closes the socket with it and the next one clears the container before
the task runs again. A stream that ends while podman still reports the process running (the
service went away, or broke the connection) counts as a killed client: exit 255, a note in
stderr, the container cleared. Only for services on this machine's unix sockets: an
``ssh://`` host keeps the CLI (``podman --remote``), see ``sandbox.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from gateway_bot.sandbox.base import SandboxUnavailable
from gateway_bot.sandbox.child import STDERR_LIMIT, STDOUT_LINE_LIMIT
from gateway_bot.sandbox.podman.exec_env import VALID_NAME, ExecEnvError
from gateway_bot.sandbox.podman.exec_release import release_exec_sessions
from gateway_bot.sandbox.podman.process import AfterExit, EndOthers

log = logging.getLogger(__name__)

API = "http://podman/v4.0.0/libpod"
STEP_TIMEOUT_S = 60.0
"""Every HTTP step (create, start's answer, inspect): podman answers in well under a
second when idle, seconds on a loaded machine; a service that hangs must not hang a task."""
LOST_STREAM_EXIT = 255
_KILLED_EXIT = -9
"""What a killed CLI gave (``-SIGKILL``); callers only tell zero from non-zero."""
_FRAME = struct.Struct(">BxxxI")
_CHUNK = 64 * 1024
_background: set[asyncio.Task[Any]] = set()
"""Tasks nobody awaits (``release_exec_sessions`` calls): a reference each, so none is
collected while it runs."""
RELEASE_WITHIN_S = 30.0
"""A finished session waits at most this long to be let go of (``ExecReleases``)."""


class ExecReleases:
    """Lets go of finished exec sessions (``exec_release.py``) once no exec started here
    runs any more, or ``RELEASE_WITHIN_S`` after the first one waiting, whichever comes
    first; together, in one thread that scans /proc once a round for them all. During a
    burst of tasks (a restart re-runs dozens, 8 at a time) each release's cleanup, a
    podman start of ~0.2 s of CPU, competed with the next tasks' execs for the cores."""

    def __init__(self) -> None:
        self._running = 0
        self._waiting: list[str] = []
        self._timer: asyncio.TimerHandle | None = None

    def started(self) -> None:
        self._running += 1

    def ended(self, exec_id: str) -> None:
        self._running = max(0, self._running - 1)
        self._waiting.append(exec_id)
        if self._running == 0:
            self.release_now()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(RELEASE_WITHIN_S, self.release_now)

    def release_now(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting, self._waiting = self._waiting, []
        if waiting:
            _hold(asyncio.create_task(asyncio.to_thread(release_exec_sessions, waiting)))


def exec_body(argv: Sequence[str], env: Mapping[str, str], workdir: str) -> dict[str, Any]:
    """The create call's JSON. Raises ExecEnvError for a name that is not one (``A=B`` would
    set another variable) or a value with NUL (no process environment can hold it)."""
    entries = []
    for name, value in env.items():
        if not VALID_NAME.fullmatch(name):  # `$` alone takes "NAME\n"
            raise ExecEnvError(f"environment variable name {name!r} is not valid")
        if "\0" in value:
            raise ExecEnvError(f"environment variable {name} has a NUL byte in its value")
        entries.append(f"{name}={value}")
    return {
        "AttachStdin": True,
        "AttachStdout": True,
        "AttachStderr": True,
        "Tty": False,
        "Cmd": list(argv),
        "Env": entries,
        "WorkingDir": workdir,
    }


async def start_api_exec(
    socket: Path,
    container: str,
    body: dict[str, Any],
    *,
    stdin_data: bytes,
    keep_stdin: bool,
    after_exit: AfterExit,
    end_others: EndOthers,
    releases: ExecReleases,
) -> PodmanApiExecProcess:
    """Create and start the exec; its stdin gets ``stdin_data`` and is closed unless
    ``keep_stdin``. Raises SandboxUnavailable when podman refuses or does not answer.
    Its session, once ended, is let go of through ``releases``."""
    session = aiohttp.ClientSession(
        connector=aiohttp.UnixConnector(path=str(socket)),
        timeout=aiohttp.ClientTimeout(total=STEP_TIMEOUT_S),
    )
    writer: asyncio.StreamWriter | None = None
    try:
        async with session.post(f"{API}/containers/{container}/exec", json=body) as answer:
            created = await _json(answer, f"create an exec in {container}")
        exec_id = str(created["Id"])
        async with asyncio.timeout(STEP_TIMEOUT_S):
            reader, writer = await _start(socket, exec_id)
        process = PodmanApiExecProcess(
            session, exec_id, reader, writer, after_exit=after_exit, end_others=end_others,
            releases=releases,
        )  # fmt: skip
    except BaseException as exc:
        if writer is not None:
            writer.transport.abort()
        await session.close()
        if isinstance(exc, aiohttp.ClientError | OSError | TimeoutError | LookupError | ValueError):
            raise SandboxUnavailable(f"podman's service did not start the task: {exc}") from exc
        raise
    try:
        if stdin_data:
            with contextlib.suppress(ConnectionError):
                await process.write(stdin_data)
        if not keep_stdin:
            process.close_stdin()
    except BaseException:  # cancelled while feeding the prompt: end the task as a kill does
        process.kill()
        _hold(asyncio.create_task(process.wait()))
        raise
    return process


def _hold(task: asyncio.Task[Any]) -> None:
    """Keep a reference to a task nobody awaits until it is done."""
    _background.add(task)
    task.add_done_callback(_background.discard)


async def _json(answer: aiohttp.ClientResponse, doing: str) -> dict[str, Any]:
    data = await answer.json(content_type=None)
    if answer.status >= 300 or not isinstance(data, dict):
        message = data.get("message") if isinstance(data, dict) else data
        raise SandboxUnavailable(f"podman could not {doing} ({answer.status}): {message}")
    return data


async def _start(socket: Path, exec_id: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The hijacked start: after the answer's head, the connection is the process's."""
    reader, writer = await asyncio.open_unix_connection(str(socket), limit=_CHUNK)
    try:
        payload = json.dumps({"Detach": False, "Tty": False}).encode()
        head = (
            f"POST {API.removeprefix('http://podman')}/exec/{exec_id}/start HTTP/1.1\r\n"
            "Host: podman\r\nContent-Type: application/json\r\n"
            "Connection: Upgrade\r\nUpgrade: tcp\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        )
        writer.write(head.encode() + payload)
        await writer.drain()
        answer = await reader.readuntil(b"\r\n\r\n")
        status = answer.split(b" ", 2)[1:2]
        if status not in ([b"101"], [b"200"]):
            detail = (await reader.read(4096)).decode("utf-8", "replace").strip()
            first = answer.split(b"\r\n", 1)[0].decode("utf-8", "replace")
            raise SandboxUnavailable(f"podman did not start the exec: {first}: {detail}")
    except BaseException:
        writer.transport.abort()
        raise
    return reader, writer


class _Frames:
    """The frame parser's state between reads: a header cut by a read's end, and what is
    left of the frame being read."""

    def __init__(self) -> None:
        self._head = bytearray()
        self._kind = 0
        self._left = 0

    def take(self, chunk: bytes, stderr: bytearray) -> bytes:
        """The stdout bytes in ``chunk``; its stderr bytes go to ``stderr`` up to
        ``STDERR_LIMIT`` (the rest is dropped by length, never copied)."""
        view = memoryview(chunk)
        out = bytearray()
        at, end = 0, len(view)
        while at < end:
            if not self._left:
                wanted = _FRAME.size - len(self._head)
                self._head += view[at : at + wanted]
                at += wanted
                if len(self._head) < _FRAME.size:
                    break
                self._kind, self._left = _FRAME.unpack(self._head)
                self._head.clear()
                continue
            step = min(self._left, end - at)
            if self._kind == 2:
                room = STDERR_LIMIT - len(stderr)
                if room > 0:
                    stderr += view[at : at + min(step, room)]
            else:
                out += view[at : at + step]
            at += step
            self._left -= step
        return bytes(out)


class _Flow(asyncio.ReadTransport):
    """What the stdout StreamReader pauses and resumes (it calls ``pause_reading`` when it
    holds more than twice its limit): the frame pump waits on ``running``."""

    def __init__(self) -> None:
        super().__init__()
        self.running = asyncio.Event()
        self.running.set()

    def pause_reading(self) -> None:
        self.running.clear()

    def resume_reading(self) -> None:
        self.running.set()

    def is_reading(self) -> bool:
        return self.running.is_set()


class PodmanApiExecProcess:
    """``PodmanExecProcess``'s interface (``SandboxProcess``) over a hijacked connection."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        exec_id: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        after_exit: AfterExit,
        end_others: EndOthers,
        releases: ExecReleases,
    ) -> None:
        self._session = session
        self._releases = releases
        releases.started()
        self.exec_id = exec_id
        self._reader = reader
        self._writer = writer
        self._after_exit = after_exit
        self._end_others = end_others
        self._stdout = asyncio.StreamReader(limit=STDOUT_LINE_LIMIT)
        self._flow = _Flow()
        self._stdout.set_transport(self._flow)
        self._stderr = bytearray()
        self._stdin_open = True
        self._killed = False
        self._pump = asyncio.create_task(self._take_frames())
        self._exit: asyncio.Task[int] | None = None
        self._notes: list[str] = []

    @property
    def stdout(self) -> asyncio.StreamReader:
        return self._stdout

    @property
    def waiting_for_reader(self) -> bool:
        """The connection is not read while ``stdout`` holds twice its limit unread (as a
        full pipe would block the writer): memory stays bounded."""
        return not self._flow.is_reading()

    async def _take_frames(self) -> None:
        """Demultiplex the stream until it ends (or breaks, or the task is killed).

        Whole reads of up to ``_CHUNK`` bytes are taken apart in one synchronous pass, and
        the loop yields after each: the process decides how its output is framed (every
        ``write(2)`` is a frame), and one await per frame let a flood of one-byte writes
        hold the daemon's event loop for a tenth of a second at a time."""
        frames = _Frames()
        try:
            while chunk := await self._reader.read(_CHUNK):
                out = frames.take(chunk, self._stderr)
                if out:
                    self._stdout.feed_data(out)
                    await self._flow.running.wait()
                await asyncio.sleep(0)
        except (ConnectionError, OSError):
            pass  # the stream broke; the exit code says what happened
        finally:
            self._stdout.feed_eof()
            self._writer.transport.abort()

    async def read_stderr(self) -> str:
        await self.wait()
        text = self._stderr.decode("utf-8", "replace")  # bounded as it came
        return "\n".join([text.rstrip(), *self._notes]) if self._notes else text

    async def wait(self) -> int:
        if self._exit is None:
            self._exit = asyncio.create_task(self._finish())
        return await asyncio.shield(self._exit)

    async def _finish(self) -> int:
        try:
            await asyncio.wait([self._pump])  # ends cancelled when killed
            self._stdin_open = False
            code = _KILLED_EXIT if self._killed else await self._exit_code()
            note = await self._after_exit(code, self._killed or code == LOST_STREAM_EXIT)
        finally:
            await self._session.close()
            # Not awaited: the reply need not wait for podman's cleanup of the session. Also
            # when the after-exit step failed: the session is over either way, and one never
            # counted as ended would hold every later release back for the full wait.
            self._releases.ended(self.exec_id)
        if note:
            self._notes.append(note)
        return code

    async def _exit_code(self) -> int:
        """The exit code podman recorded; LOST_STREAM_EXIT (with a note) when the stream
        ended while the process still ran or the service did not answer. Asked a few times:
        the service may record the exit a moment after the stream's end."""
        try:
            for _ in range(20):
                async with self._session.get(f"{API}/exec/{self.exec_id}/json") as answer:
                    info = await _json(answer, f"inspect exec {self.exec_id[:12]}")
                if not info.get("Running"):
                    return int(info.get("ExitCode") or 0)
                await asyncio.sleep(0.1)
            problem = "the podman service ended the task's stream while it still ran"
        except (aiohttp.ClientError, OSError, TimeoutError, SandboxUnavailable) as exc:
            problem = f"the podman service stopped answering during the task ({exc})"
        log.warning("exec %s: %s", self.exec_id[:12], problem)
        self._notes.append(f"sandbox: {problem}; the task's processes were ended.")
        return LOST_STREAM_EXIT

    def kill(self) -> None:
        """Close the connection; the after-exit step clears the container (the process
        inside outlives its client, as with the CLI)."""
        if self._pump.done():
            return
        self._killed = True
        self._pump.cancel()

    async def write(self, data: bytes) -> None:
        """Raises BrokenPipeError once stdin is closed, ConnectionError when the stream is
        gone, instead of losing ``data`` silently."""
        if not self._stdin_open or self._writer.is_closing():
            raise BrokenPipeError("the process's stdin is closed")
        self._writer.write(data)
        await self._writer.drain()

    def close_stdin(self) -> None:
        if self._stdin_open:
            self._stdin_open = False
            if not self._writer.is_closing():
                with contextlib.suppress(OSError, RuntimeError):
                    self._writer.write_eof()

    async def end_others(self) -> None:
        await self._end_others()
