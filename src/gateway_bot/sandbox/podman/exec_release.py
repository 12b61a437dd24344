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

_ROUNDS = 60
_NICE = 10
_PAUSE_S = 0.05


def release_exec_session(exec_id: str) -> bool:
    """Wake the sleeping cleanup child of ``exec_id``'s conmon; True when one was woken.
    Blocking (a few scans of /proc, at most ~3 s): call it in a thread, after the exec's
    process has ended (before that, conmon's children are the runtime and the process)."""
    woken = False
    signalled: set[int] = set()
    for _ in range(_ROUNDS):
        conmons = _session_conmons(exec_id)
        if not conmons:
            return woken  # cleaned up (or never on this machine)
        sleeping = [pid for pid, parent in conmons.items() if parent in conmons]
        if not sleeping and woken:
            return True  # the child became `podman container cleanup`
        for pid in sleeping:
            if pid in signalled:
                # Once only: it may have become `podman container cleanup` since this round's
                # scan, and a second SIGTERM would end the cleanup itself (the session then
                # stays listed until the container goes).
                continue
            signalled.add(pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                # The cleanup is a podman CLI start (what the exec CLI cost): at a low priority
                # it waits for idle CPU instead of slowing the tasks after this one.
                os.setpriority(os.PRIO_PROCESS, pid, _NICE)
                os.kill(pid, signal.SIGTERM)
                woken = True
        time.sleep(_PAUSE_S)
    return woken


def _session_conmons(exec_id: str) -> dict[int, int]:
    """pid -> parent pid of every conmon of the daemon's user running this exec session."""
    wanted = exec_id.encode()
    found: dict[int, int] = {}
    own_uid = os.getuid()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
            if not argv[0].endswith(b"conmon") or not _names_session(argv, wanted):
                continue
            if os.stat(f"/proc/{pid}").st_uid != own_uid:
                continue
            with open(f"/proc/{pid}/stat", "rb") as stat:
                found[pid] = int(stat.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or not ours to read
    return found


def _names_session(argv: list[bytes], exec_id: bytes) -> bool:
    """conmon ``-u SESSION``: the exec session's id as conmon's unit id."""
    return any(arg == b"-u" and value == exec_id for arg, value in itertools.pairwise(argv))
