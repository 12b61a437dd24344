"""Ending every process in a container but its init, from the host.

The obvious way, ``podman exec CONTAINER sh -c 'kill -9 -1'``, runs the container's own
``sh`` and ``kill``: the agent is root in there and can replace them with programs that do
nothing, and its background processes (a disk filler, a loop racing the outbox) then live
on after the task, after /stop, after a crash. So the daemon does it itself: a process
belongs to the container when its cgroup (which a process inside cannot leave: the cgroup
filesystem is read-only in there) or its PID namespace is the container init's; each is
sent SIGKILL, until none is left.

A warm agent session's process stays between turns while everything it left ends: it is
spared by being the root of its ``podman exec`` (its parent, conmon, is outside the
container; nothing the agent starts can get a parent there) and by carrying that exec's own
run mark in its environment. Its children are not spared.

Nothing else is spared, init's children included: init (``containers.INIT_COMMAND``) is
the host's read-only, non-dumpable init (``init.c``), which starts none. And a PID podman
gave as an init is checked to still be one (``_init``) before anything is swept on its
word.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass

from gateway_bot.sandbox.child import RUN_MARK, is_zombie, kill_until_gone, parent_of


@dataclass(frozen=True)
class ProcessIdentity:
    """One process for ever: its PID and its start time (clock ticks after boot, from
    ``/proc/PID/stat``). A PID is reused once its process is gone; the pair never is."""

    pid: int
    started: int


def init_identity(pid: int) -> ProcessIdentity | None:
    """The identity of container init ``pid`` (checked as ``_init`` checks it), None when
    it is gone or no init. Taken when podman names the init (its listing, an inspect):
    ``still_running`` later tells, from /proc alone, that this very process still runs,
    so its container does (a container runs exactly as long as its init)."""
    if _init(pid) is None:
        return None
    return _identity(pid)


def still_running(identity: ProcessIdentity) -> bool:
    """Is the process ``identity`` names alive (not gone, not a zombie, not another
    process with its PID)?"""
    return _identity(identity.pid) == identity


def _identity(pid: int) -> ProcessIdentity | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # After the command: state is field 3 of stat (index 0 here), starttime field 22 (19).
    if len(fields) < 20 or fields[0] in (b"Z", b"X", b"x"):
        return None
    return ProcessIdentity(pid, int(fields[19]))


def kill_all_but_init(init_pid: int, keep_exec: str | None = None) -> int:
    """SIGKILL every process of the container whose init has host PID ``init_pid``, but the
    exec root marked ``RUN_MARK=keep_exec`` when given; return how many kills were sent.
    Repeats while new ones appear (a fork bomb), bounded."""
    init = _init(init_pid)
    if init is None:
        return 0  # the container is gone
    namespace, cgroup = init
    spared = {init_pid}
    if keep_exec is not None:
        mark = f"{RUN_MARK}={keep_exec}".encode()
        members = [pid for pid in _pids() if _belongs(pid, cgroup, namespace)]
        spared |= {
            pid for pid in members if _exec_root(pid, cgroup, namespace) and _marked(pid, mark)
        }
    return kill_until_gone(
        lambda: [pid for pid in _pids() if pid not in spared and _belongs(pid, cgroup, namespace)]
    )


def kill_all_but_inits(init_pids: Collection[int]) -> int:
    """``kill_all_but_init`` for many containers at once, one pass over /proc a round
    instead of one per container: a restart takes over every running container, and 50
    scans of every process on the host were most of its take-over."""
    namespaces: set[str] = set()
    cgroups: set[str] = set()
    for init_pid in init_pids:
        init = _init(init_pid)
        if init is None:
            continue  # that container is gone
        namespace, cgroup = init
        namespaces.add(namespace)
        if cgroup is not None:
            cgroups.add(cgroup)
    if not namespaces:
        return 0
    inits = set(init_pids)

    def find() -> list[int]:
        found = []
        for pid in _pids():
            if pid in inits:
                continue
            try:
                if (
                    os.readlink(f"/proc/{pid}/ns/pid") in namespaces
                    or (cgroups and _read(f"/proc/{pid}/cgroup") in cgroups)
                ) and not is_zombie(pid):
                    found.append(pid)
            except (OSError, IndexError):
                continue
        return found

    return kill_until_gone(find)


def _init(pid: int) -> tuple[str, str | None] | None:
    """(PID namespace, cgroup) of the container init ``pid``; None when it is gone, or
    when ``pid`` is no container's init any more. The PID comes from podman a moment
    earlier, and the agent can end its init at will (``kill -TERM 1`` stops it), so the
    PID may have been reused meanwhile: by a process of the daemon's own PID
    namespace (taken for an init, every process on the machine would be swept), or one
    inside another container. An init is the first process of a PID namespace that is not
    the daemon's. Its cgroup identifies the container only when it is neither the daemon's
    nor its parent's (conmon's): podman leaves a container without cgroups of its own in
    its caller's, with whatever else runs there. None then: only the namespace counts."""
    try:
        namespace = os.readlink(f"/proc/{pid}/ns/pid")
        cgroup: str | None = _read(f"/proc/{pid}/cgroup")
        if namespace == os.readlink("/proc/self/ns/pid") or not _first_in_namespace(pid):
            return None
        shared = (_read("/proc/self/cgroup"), _read(f"/proc/{parent_of(pid)}/cgroup"))
        if cgroup in shared:
            cgroup = None
    except (OSError, IndexError, ValueError):
        return None
    return namespace, cgroup


def _first_in_namespace(pid: int) -> bool:
    """PID 1 of its innermost PID namespace (the last of ``NSpid`` in its status)."""
    with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as status:
        for line in status:
            if line.startswith("NSpid:"):
                ids = line.split()[1:]
                return len(ids) > 1 and ids[-1] == "1"
    return False


def _exec_root(pid: int, cgroup: str | None, namespace: str) -> bool:
    """Started by ``podman exec``: its parent is outside the container. A parent that
    cannot be read (gone meanwhile) does not make it one; nor does a parent whose leader
    thread has exited (shown as a zombie while its other threads run: still inside)."""
    try:
        parent = parent_of(pid)
        return not _inside(parent, cgroup, namespace)
    except (OSError, IndexError, ValueError):
        return False


def _marked(pid: int, mark: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            return mark in environ.read().split(b"\0")
    except OSError:
        return False


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _belongs(pid: int, cgroup: str | None, namespace: str) -> bool:
    """A live process of the container (a zombie is dead already: nothing to kill). The
    namespace first: one readlink tells most of the host's processes apart, and only the
    container's have their stat read (a sweep after every task scans all of /proc)."""
    try:
        return _inside(pid, cgroup, namespace) and not is_zombie(pid)
    except (OSError, IndexError):
        return False


def _inside(pid: int, cgroup: str | None, namespace: str) -> bool:
    """In the container's PID namespace or cgroup. Raises OSError when ``pid`` is gone."""
    if os.readlink(f"/proc/{pid}/ns/pid") == namespace:
        return True
    return cgroup is not None and _read(f"/proc/{pid}/cgroup") == cgroup


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()
