"""Letting go of a finished REST exec session at once instead of five minutes later.

Podman's service keeps every exec session it ran for ``exit_command_delay`` (300 s by
default in containers.conf) so a client can still ask for its exit code: the session's
conmon forks a child that sleeps that long, then runs ``podman container cleanup --rm
--exec SESSION CONTAINER``. Until then the session is listed in the container's
``ExecIDs``, two conmon processes per task live on (a restart runs dozens of tasks), and
the session's files stay in the container's directory.

Once the daemon has read the exit code it needs nothing more, so it wakes that sleeping
child with SIGTERM: conmon's handler interrupts the ``sleep`` and the cleanup runs now, at
nice 10 (it is a podman start, ~0.2 s of CPU: on a busy host it yields to the next tasks,
as in a restart's burst of re-run tasks, yet still ends within seconds; at 19 it could
wait minutes behind a loaded machine's work).
The daemon does it for finished sessions together (``api_exec.ExecReleases``): when no
exec of its own runs any more, or 30 s after the first one waits, whichever comes first.
Only for a service on this machine (its conmons are in this machine's /proc), and only a
process that is a conmon of this session (its command line names the session id, which
nothing in the container knows), running as the daemon's own user, whose parent is the
session's first conmon.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from collections.abc import Collection

_ROUNDS = 60
_NICE = 10
_PAUSE_S = 0.05


def release_exec_session(exec_id: str) -> bool:
    """Wake the sleeping cleanup child of ``exec_id``'s conmon; True when one was woken.
    Blocking (a few scans of /proc, at most ~3 s): call it in a thread, after the exec's
    process has ended (before that, conmon's children are the runtime and the process)."""
    return release_exec_sessions([exec_id]) > 0


def release_exec_sessions(exec_ids: Collection[str]) -> int:
    """``release_exec_session`` for many sessions at once, one scan of /proc a round for
    them all (a restart's burst of tasks ends dozens); returns how many were woken."""
    left = {exec_id.encode() for exec_id in exec_ids}
    woken: set[bytes] = set()
    signalled: set[int] = set()
    for _ in range(_ROUNDS):
        found = _session_conmons(left)
        for session in list(left):
            conmons = found.get(session, {})
            sleeping = [pid for pid, parent in conmons.items() if parent in conmons]
            if not conmons or (not sleeping and session in woken):
                left.discard(session)  # cleaned up (or never on this machine), or cleaning
                continue
            for pid in sleeping:
                if pid in signalled:
                    # Once only: it may have become `podman container cleanup` since this
                    # round's scan, and a second SIGTERM would end the cleanup itself (the
                    # session then stays listed until the container goes).
                    continue
                signalled.add(pid)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    # The cleanup is a podman CLI start (what the exec CLI cost): at a low
                    # priority it waits for idle CPU instead of slowing the next tasks.
                    os.setpriority(os.PRIO_PROCESS, pid, _NICE)
                    os.kill(pid, signal.SIGTERM)
                    woken.add(session)
        if not left:
            break
        time.sleep(_PAUSE_S)
    return len(woken)


def _session_conmons(exec_ids: Collection[bytes]) -> dict[bytes, dict[int, int]]:
    """For each of ``exec_ids``: pid -> parent pid of every conmon of the daemon's user
    running that exec session."""
    found: dict[bytes, dict[int, int]] = {}
    own_uid = os.getuid()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
            if not argv[0].endswith(b"conmon"):
                continue
            session = _session_of(argv)
            if session is None or session not in exec_ids:
                continue
            if os.stat(f"/proc/{pid}").st_uid != own_uid:
                continue
            with open(f"/proc/{pid}/stat", "rb") as stat:
                parent = int(stat.read().rsplit(b")", 1)[1].split()[1])
            found.setdefault(session, {})[pid] = parent
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or not ours to read
    return found


def _session_of(argv: list[bytes]) -> bytes | None:
    """conmon ``-u SESSION``: the exec session's id as conmon's unit id."""
    return next((value for arg, value in itertools.pairwise(argv) if arg == b"-u"), None)
