"""Starting and stopping the host processes every sandbox runs an agent through.

Each is started in its own process group (so a kill reaches everything it spawned) under
``setpriv --pdeathsig KILL`` where available (so if the daemon dies, even by kill -9, the
process dies with it and a restarted daemon never races an orphan of the same task). Its
prompt is written to stdin, which is then closed, or kept open for later writes (a warm
agent session's turns: ``keep_stdin``, ``ProcessStdin``).

A process group does not hold what started a new group or session (the agent's Bash tool
does, and so does ``setsid``): host runs also get their own PID namespace and a marker in
their environment, see ``pid_namespace_prefix`` and ``end_marked_processes``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
import signal
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from pathlib import Path

STDERR_LIMIT = 64 * 1024
STDOUT_LINE_LIMIT = 16 * 1024 * 1024
"""One stream-json line can carry a whole file the agent read."""

STDOUT_PIPE_BYTES = 1024 * 1024
"""The stdout pipe's capacity when the host allows it (``fs.pipe-max-size``, 1 MiB by
default; Linux gives 64 KiB unasked). The claude CLI, a Bun binary, exits without waiting
for its reader: whatever of its last writes did not fit in the pipe is dropped, so a daemon
lagging behind by more than the pipe held lost the end of a run (its result line: the run
"failed" with exit code 0). Its last events (the answer, then the result repeating it)
must fit in the pipe."""


async def spawn_fed(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    stdin_data: bytes,
    cwd: Path | None = None,
    keep_stdin: bool = False,
) -> asyncio.subprocess.Process:
    """Start ``argv`` with ``stdin_data`` written to its stdin, which is then closed unless
    ``keep_stdin`` (then ``ProcessStdin`` writes the rest)."""
    command = list(argv)
    setpriv = shutil.which("setpriv")
    if setpriv:
        command = [setpriv, "--pdeathsig", "KILL", "--", *command]
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=cwd,
        env=dict(env),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        limit=STDOUT_LINE_LIMIT,
    )
    _widen_stdout_pipe(process)
    assert process.stdin is not None
    if stdin_data or not keep_stdin:
        process.stdin.write(stdin_data)
        with contextlib.suppress(ConnectionError):
            await process.stdin.drain()
    if not keep_stdin:
        process.stdin.close()
    return process


def _widen_stdout_pipe(process: asyncio.subprocess.Process) -> None:
    """Give the process's stdout pipe ``STDOUT_PIPE_BYTES`` (or the host's maximum), so an
    agent that exits right after its last writes loses none of them. Best effort: a host
    that refuses (a per-user pipe quota) keeps the default."""
    limit = STDOUT_PIPE_BYTES
    with contextlib.suppress(OSError, ValueError):
        limit = min(limit, int(Path("/proc/sys/fs/pipe-max-size").read_text()))
    # asyncio keeps the pipe in the subprocess transport; it offers no public handle to it.
    transport = getattr(process, "_transport", None)
    pipe = transport.get_pipe_transport(1) if transport is not None else None
    stdout = pipe.get_extra_info("pipe") if pipe is not None else None
    if stdout is not None and hasattr(fcntl, "F_SETPIPE_SZ"):
        # ValueError: the pipe is closed already (a process that wrote little and exited
        # while it was being started: everything it wrote has been read).
        with contextlib.suppress(OSError, ValueError):
            fcntl.fcntl(stdout.fileno(), fcntl.F_SETPIPE_SZ, limit)


class ProcessStdin:
    """A started process's stdin as sandbox processes offer it (``write``, ``close_stdin``):
    written whenever the caller has more, closed once. A process started without
    ``keep_stdin`` has it closed already, so every write is refused."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._writer = process.stdin

    async def write(self, data: bytes) -> None:
        """Raises ConnectionError (BrokenPipeError when closed, ConnectionResetError when the
        process has gone) instead of losing ``data`` silently."""
        writer = self._writer
        if writer is None or writer.is_closing():
            raise BrokenPipeError("the process's stdin is closed")
        writer.write(data)
        await writer.drain()

    def close(self) -> None:
        if self._writer is not None and not self._writer.is_closing():
            self._writer.close()


async def read_bounded(stream: asyncio.StreamReader | None) -> str:
    """All of a stream until it ends, keeping the first STDERR_LIMIT bytes."""
    if stream is None:
        return ""
    chunks: list[bytes] = []
    size = 0
    while chunk := await stream.read(4096):
        if size < STDERR_LIMIT:
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks)[:STDERR_LIMIT].decode("utf-8", "replace")


def kill_group(process: asyncio.subprocess.Process) -> None:
    """Kill the process and everything in its group. Safe to call more than once."""
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


REAP_WAIT_S = 10.0
"""How long ``reaped`` waits for a killed process's pipes to close."""


@contextlib.asynccontextmanager
async def reaped(process: asyncio.subprocess.Process) -> AsyncIterator[None]:
    """For the block that awaits ``process`` (its ``communicate()``, its output): when the
    block raises (the awaiting task cancelled by /stop, shutdown or a task timeout;
    ``asyncio.timeout``; any error), the process is killed if it still runs, with its whole
    group when it leads one, and waited for before the exception goes on. Without it a
    cancelled ``communicate()`` leaves its child running, a git fetch and its ssh or
    remote helper for as long as they like, holding the mirror's lock files.

    Start the process with ``start_new_session=True`` when it may have children of its own
    (git runs hooks, helpers and shell aliases): killing only the process orphans them, and
    asyncio's ``wait()`` lasts until the last holder of its pipes is gone. A holder that left
    the group (``setsid``) is not waited for past ``REAP_WAIT_S``: the process itself is
    reaped by asyncio's child watcher all the same."""
    try:
        yield
    except BaseException:
        if process.returncode is None:
            _kill_tree(process)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(REAP_WAIT_S):
                    await process.wait()
        raise


def _kill_tree(process: asyncio.subprocess.Process) -> None:
    """SIGKILL the process, and its group when it leads one (not reaped yet: its pid and
    group id are still its own)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(process.pid) == process.pid:
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()


RUN_MARK = "GATEWAY_BOT_RUN"
"""Environment variable holding a per-run token. Every descendant inherits it unless it
clears its environment, so a sweep of /proc finds the run's processes wherever they went:
a new session, a new process group, reparented to init after their parent died."""

_SWEEP_ROUNDS = 100
_SWEEP_PAUSE_S = 0.02


async def pid_namespace_prefix() -> list[str]:
    """The argv prefix that runs a command as init of its own PID namespace, or [] where
    this host does not allow one. When that init exits or is killed, the kernel kills every
    process left in the namespace, whatever session or group it moved to: the one reliable
    way to end a run's whole process tree on the host."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return []
    candidates = (
        [unshare, "--pid", "--fork", "--kill-child"],
        # Without CAP_SYS_ADMIN a user namespace makes the PID namespace possible.
        [unshare, "--user", "--map-current-user", "--pid", "--fork", "--kill-child"],
    )
    for prefix in candidates:
        probe = await asyncio.create_subprocess_exec(
            *prefix,
            "--",
            "true",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        if await probe.wait() == 0:
            return [*prefix, "--"]
    return []


def end_marked_processes(token: str, spared: Collection[int] = ()) -> int:
    """Kill every process whose environment carries ``RUN_MARK=token``, and every
    descendant of one (a child that cleared its environment), until none is left; the
    ``spared`` pids excepted (a warm agent session's own process between turns).
    Blocking: call it in a thread. Returns how many kills were sent."""
    mark = f"{RUN_MARK}={token}".encode()
    return kill_until_gone(lambda: _marked_tree(mark) - set(spared))


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return int(stat.read().rsplit(b")", 1)[1].split()[1])


def children_of(pid: int) -> set[int]:
    """The live children of ``pid`` (a scan of /proc: no kernel option needed)."""
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                if parent_of(int(name)) == pid:
                    found.add(int(name))
    return found


def kill_until_gone(find: Callable[[], Collection[int]]) -> int:
    """SIGKILL every process ``find`` names, and again, until it names none (a process
    may fork while its siblings die), for at most ``_SWEEP_ROUNDS`` rounds. Blocking: call
    it in a thread. Returns how many kills were sent."""
    kills = 0
    for _ in range(_SWEEP_ROUNDS):
        targets = find()
        if not targets:
            break
        for pid in targets:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                kills += 1
        time.sleep(_SWEEP_PAUSE_S)  # let the killed exit before looking again
    return kills


def is_zombie(pid: int) -> bool:
    """Dead already, waiting for its parent to reap it: killing it again does nothing.

    Only when no thread of it is left: a process whose main thread exited (``pthread_exit``)
    shows ``Z`` in its stat while its other threads run on, and one that looked dead that
    way was never killed (an agent's way to outlive every sweep)."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    # field 20 of stat (index 17 after the command) is num_threads
    return fields[0] == b"Z" and int(fields[17]) <= 1


def _environment(pid: int) -> bytes:
    """The process's environment; read through a live thread when its main thread has
    exited (``/proc/PID/environ`` then answers ESRCH while the process runs on)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            return environ.read()
    except ProcessLookupError:
        for thread in os.listdir(f"/proc/{pid}/task"):
            with (
                contextlib.suppress(OSError),
                open(f"/proc/{pid}/task/{thread}/environ", "rb") as environ,
            ):
                return environ.read()
        raise


def _marked_tree(mark: bytes) -> set[int]:
    parents: dict[int, int] = {}
    marked: set[int] = set()
    own = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == own:
            continue
        pid = int(name)
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            if fields[0] == b"Z" and int(fields[17]) <= 1:  # dead already (see is_zombie)
                continue
            parents[pid] = int(fields[1])
            if mark in _environment(pid).split(b"\0"):
                marked.add(pid)
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or not ours to read
    tree = set(marked)
    grew = True
    while grew:
        children = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= children
        grew = bool(children)
    return tree
