"""The agent's schedule request: ``outbox/schedule.json``, read as hostile input.

The agent proposes a scheduled run by writing, in its outbox::

    {"when": "every weekday at 9:00", "prompt": "check the nightly build", "tz": "Europe/Berlin"}

``when`` is what ``/schedule`` takes as WHEN (a phrase, or a cron rule, quoted or not);
``tz`` is optional (the conversation's zone otherwise). Nothing is created from it: the
conversation gets a card to allow or deny (``core/schedules/proposals.py``).

The outbox is the agent's: the entry may be a link to a host file, a FIFO, a directory or
gigabytes. So it is taken through the sandbox (``ContextFiles.take_outbox_file``): only a
regular file of at most ``MAX_REQUEST_BYTES`` is read, and the entry is removed whatever it
was, so it is looked at once (on this machine: ``sandbox/host_files.py``, no-follow opens
relative to the outbox's descriptor). It is never sent as an attachment: ``Workspaces.take_outbox``
skips this name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from gateway_bot.sandbox.context_files import ContextFiles, FileRefused

REQUEST_FILE = "schedule.json"
MAX_REQUEST_BYTES = 16 * 1024
MAX_PROMPT_CHARS = 4000
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


async def take_request_file(files: ContextFiles) -> RequestFile | None:
    """Read and remove ``outbox/schedule.json`` (through the sandbox: the outbox is the
    agent's); None when there is none."""
    try:
        data = await files.take_outbox_file(REQUEST_FILE, MAX_REQUEST_BYTES)
    except FileRefused as exc:
        return BadRequest(f"{REQUEST_FILE} {exc}: ignored")
    if data is None:
        return None
    return parse_request_file(data)


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
