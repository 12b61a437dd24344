"""The agent's schedule request: ``outbox/schedule.json``, read as hostile input.

The agent proposes a scheduled run by writing, in its outbox::

    {"when": "every weekday at 9:00", "prompt": "check the nightly build", "tz": "Europe/Berlin"}

``when`` is what ``/schedule`` takes as WHEN (a phrase, or a cron rule, quoted or not);
``tz`` is optional (the conversation's zone otherwise). Nothing is created from it: the
conversation gets a card to allow or deny (``core/schedule_proposals.py``).

The outbox is the agent's: the entry may be a link to a host file, a FIFO, a directory or
gigabytes. So it is opened once, no-follow and non-blocking, relative to a descriptor of
the outbox opened no-follow; only a regular file of at most ``MAX_REQUEST_BYTES`` is read,
from that descriptor; and the entry is removed whatever it was (``unlink`` never follows),
so it is looked at once. It is never sent as an attachment: ``Workspaces.take_outbox``
skips this name.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

REQUEST_FILE = "schedule.json"
MAX_REQUEST_BYTES = 16 * 1024
MAX_PROMPT_CHARS = 4000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KEYS = frozenset({"when", "prompt", "tz"})

SHAPE = '{"when": "every weekday at 9:00", "prompt": "...", "tz": "Europe/Berlin"}'


@dataclass(frozen=True)
class ScheduleAsk:
    """A well-formed request (its WHEN and zone not yet checked)."""

    when: str
    prompt: str
    timezone: str | None


@dataclass(frozen=True)
class BadRequest:
    """A request file that cannot be used; ``problem`` says why, for the conversation."""

    problem: str


RequestFile = ScheduleAsk | BadRequest


def take_request_file(outbox: Path) -> RequestFile | None:
    """Read and remove ``outbox/schedule.json``; None when there is none. Blocking: call
    it in a worker thread."""
    try:
        outbox_fd = os.open(outbox, _DIR_FLAGS)
    except OSError:
        return None  # no outbox (or a link in its place): nothing to read
    try:
        try:
            fd = os.open(REQUEST_FILE, _READ_FLAGS, dir_fd=outbox_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            _remove(outbox_fd)
            if exc.errno == errno.ELOOP:
                return BadRequest(f"{REQUEST_FILE} is a symbolic link, not a file: ignored")
            return BadRequest(f"{REQUEST_FILE} could not be opened ({exc.strerror}): ignored")
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return BadRequest(f"{REQUEST_FILE} is not a regular file: ignored")
            if info.st_size > MAX_REQUEST_BYTES:
                return BadRequest(
                    f"{REQUEST_FILE} has {info.st_size:,} bytes, more than the "
                    f"{MAX_REQUEST_BYTES:,} allowed: ignored"
                )
            data = os.read(fd, MAX_REQUEST_BYTES + 1)  # the file may have grown since fstat
        finally:
            os.close(fd)
            _remove(outbox_fd)
    finally:
        os.close(outbox_fd)
    if len(data) > MAX_REQUEST_BYTES:
        return BadRequest(f"{REQUEST_FILE} is larger than {MAX_REQUEST_BYTES:,} bytes: ignored")
    return parse_request_file(data)


def _remove(outbox_fd: int) -> None:
    with contextlib.suppress(OSError):  # a directory stays (take_outbox never sends one)
        os.unlink(REQUEST_FILE, dir_fd=outbox_fd)


def parse_request_file(data: bytes) -> RequestFile:
    """The JSON object's fields, or what is wrong with it (said so the agent can fix it)."""
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return BadRequest(f"{REQUEST_FILE} is not valid JSON ({exc}); expected {SHAPE}")
    if not isinstance(value, dict):
        return BadRequest(f"{REQUEST_FILE} must hold one JSON object: {SHAPE}")
    unknown = sorted(str(key) for key in value if key not in _KEYS)
    if unknown:
        return BadRequest(f"{REQUEST_FILE} has unknown keys {', '.join(unknown)}; expected {SHAPE}")
    when, prompt, timezone = value.get("when"), value.get("prompt"), value.get("tz")
    if not isinstance(when, str) or not when.strip():
        return BadRequest(f'{REQUEST_FILE} needs "when" (a string); expected {SHAPE}')
    if not isinstance(prompt, str) or not prompt.strip():
        return BadRequest(f'{REQUEST_FILE} needs "prompt" (a string); expected {SHAPE}')
    if len(prompt) > MAX_PROMPT_CHARS:
        return BadRequest(f'"prompt" in {REQUEST_FILE} is over {MAX_PROMPT_CHARS} characters')
    if timezone is not None and not isinstance(timezone, str):
        return BadRequest(f'"tz" in {REQUEST_FILE} must be a zone name such as "Europe/Berlin"')
    return ScheduleAsk(when.strip(), prompt.strip(), timezone.strip() if timezone else None)
