"""Append-only log of a conversation's raw agent stream (events.jsonl).

Lives beside the workspace, never inside it, so the agent cannot read or rewrite its own
history. One writer: the task running in that conversation (one task at a time).
A blank line separates the runs of two tasks.

Capped: an agent that prints without end must not fill the host's disk through its log.
The line that would cross the cap is replaced by one JSON line saying the log was cut, and
nothing more is appended, in this run or later ones. A write that fails (a full disk) is
logged and skipped: the log is a record, never a reason for the run to fail.

Each line the agent printed follows a line of the daemon's own, ``{"type":
"gateway_bot_at", "at": <epoch seconds>}``: when the host received it, so a timeline can
say when each step happened and how long it took. The agent can print a line of that shape
too, but the daemon's own comes right before every line the agent printed, so a forged one
dates no event (``core/conversations/timeline.py`` reads them). A run's first line, before
any of the agent's, may be ``{"type": "gateway_bot_ready", "at": ...}``: when the sandbox had
the agent's process running (a container created or started, or a warm process's turn
begun), so a task's waterfall tells the container's time from the CLI's start.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import time
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_LIMIT_BYTES = 50 * 1024 * 1024
TIME_MARKER = "gateway_bot_at"
READY_MARKER = "gateway_bot_ready"
RECENT_BYTES = 8 * 1024 * 1024


class EventLog:
    def __init__(self, path: Path, limit_bytes: int = DEFAULT_LIMIT_BYTES) -> None:
        self.path = path
        self.limit_bytes = limit_bytes
        self._size: int | None = None
        """Bytes in the file, read once per instance; None until the first append."""
        self._failed = False

    async def append(self, line: str) -> None:
        received = json.dumps({"type": TIME_MARKER, "at": round(time.time(), 3)})
        await asyncio.to_thread(self._append, received + "\n" + line.rstrip("\n") + "\n")

    async def note_ready(self) -> None:
        """The run's process is up in its sandbox (written before any line of the agent's)."""
        ready = json.dumps({"type": READY_MARKER, "at": round(time.time(), 3)})
        await asyncio.to_thread(self._append, ready + "\n")

    async def end_run(self) -> None:
        await asyncio.to_thread(self._append, "\n")

    async def recent_lines(self, limit_bytes: int = RECENT_BYTES) -> list[str]:
        """The log's last lines (its last ``limit_bytes``, the cut first line dropped), for
        a runner that needs what earlier runs of the conversation said; none when there is
        no log or it is not a regular file (never followed through a link)."""
        return await asyncio.to_thread(self._recent_lines, limit_bytes)

    def _recent_lines(self, limit_bytes: int) -> list[str]:
        try:
            handle = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return []
        with os.fdopen(handle, "rb") as log_file:
            size = os.fstat(log_file.fileno())
            if not stat.S_ISREG(size.st_mode):
                return []
            start = max(0, size.st_size - limit_bytes)
            log_file.seek(start)
            lines = log_file.read(limit_bytes).decode("utf-8", "replace").splitlines()
        return lines[1:] if start > 0 else lines

    def _append(self, text: str) -> None:
        try:
            self._write(text.encode("utf-8", "replace"))
        except OSError as exc:
            if not self._failed:
                log.warning("cannot append to %s: %s", self.path, exc)
            self._failed = True

    def _write(self, data: bytes) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._size is None:
            self._size = self._size_so_far()
        if self._size >= self.limit_bytes:
            return  # cut already: the note is the last line
        cut = self._size + len(data) > self.limit_bytes
        if cut:
            data = _CUT_NOTE_HEAD + json.dumps(self.limit_bytes).encode() + _CUT_NOTE_TAIL
        with self.path.open("ab") as handle:
            handle.write(data)
        self._size = self.limit_bytes if cut else self._size + len(data)

    def _size_so_far(self) -> int:
        """The file's size, or the limit when an earlier run already cut it."""
        if not self.path.exists():
            return 0
        with self.path.open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - 1024))
            tail = handle.read()
        last_line = tail.rstrip(b"\n").rsplit(b"\n", 1)[-1]
        return max(size, self.limit_bytes) if last_line.startswith(_CUT_NOTE_HEAD) else size


_CUT_NOTE_HEAD = b'{"type": "gateway_bot_cut", "limit_bytes": '
_CUT_NOTE_TAIL = (
    b', "text": "events.jsonl reached its size limit (execution.events_log_limit_mb); '
    b'later events of this conversation are not logged"}\n'
)
