"""A process that looks dead but is not still ends with its task (an attack test).

Before: a process whose main thread called ``pthread_exit`` while another thread ran on
showed ``Z`` in ``/proc/PID/stat``; every sweep (per turn, ``/stop``, limits) skipped it as
a zombie its parent would reap, and it outlived them all. Now a process counts as dead only
when no thread of it is left.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from gateway_bot.sandbox.child import RUN_MARK, end_marked_processes, is_zombie

_HALF_DEAD = """
import ctypes, threading, time
threading.Thread(target=lambda: time.sleep(600), daemon=False).start()
ctypes.CDLL(None).pthread_exit(None)  # the main thread leaves; the process runs on
"""


def _state(pid: int) -> bytes:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return stat.read().rsplit(b")", 1)[1].split()[0]


def test_a_process_whose_main_thread_exited_is_killed_by_the_sweep() -> None:
    token = f"half-dead-{os.getpid()}"
    process = subprocess.Popen(
        [sys.executable, "-c", _HALF_DEAD], env={**os.environ, RUN_MARK: token}
    )
    try:
        deadline = time.monotonic() + 30
        while _state(process.pid) != b"Z":
            assert time.monotonic() < deadline, "the main thread never exited"
            time.sleep(0.05)
        assert not is_zombie(process.pid), "a thread of it still runs"

        end_marked_processes(token)

        process.wait(10)  # gone: killed, not waiting out its 600 s sleep
    finally:
        process.kill()
        process.wait(10)
