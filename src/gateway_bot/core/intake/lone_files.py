"""Files sent without words wait briefly for the words about them.

Element and Slack's mobile apps send a file as a message of its own and what the person
says about it as the next one: routed as they come, the file costs an agent run on an empty
text and the words a second run. Here a message that is only files (a blank body) waits up
to ``wait_s`` for its sender's next message in the same room (a DM, a Matrix room, a Slack
channel: Slack starts a thread per top-level message, so "the same conversation" would
never match there); that message takes the files with it, one run with the words and every
file. Further files-only messages join the wait and start it over. Past the wait, the files
run alone, and the prompt says that only files arrived (``core/conversations/prompts.py``).

Durable without a table of its own: a waiting message's task stays AUTHENTICATING, stored
and routed no further, and every start routes such tasks again (``core/intake/recovery.py``):
the wait starts over and nothing is lost. A message that takes the files is queued (its
task PENDING, carrying them) before the waiting tasks are completed, so a kill between the
two writes runs the files again alone after the restart: twice rather than never.

Expiry goes through intake again (``take_in`` of the group's first task, under the
channel's lock and its retries), so files that ran alone keep their place in the channel's
order; the words arriving just then, ahead of that re-routing, still take them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway_bot.core.admission.engagement import is_blank
from gateway_bot.domain.messages import InboundMessage

log = logging.getLogger(__name__)

TakeIn = Callable[[str, str], None]
"""Routes a stored task again (``Intake.take_in``: task id, channel)."""

Key = tuple[str, str, str]
"""(channel, room, sender): whose next message takes the files."""


@dataclass
class _Waiting:
    """One sender's files-only messages in one room, oldest first, and their timer."""

    tasks: list[tuple[str, InboundMessage]] = field(default_factory=list)
    timer: asyncio.Task[None] | None = None


@dataclass(frozen=True)
class Gathered:
    """What routing does with a message: queue ``message`` (None: it waits, nothing to do
    now), then complete ``joined``, the tasks whose files it carries."""

    message: InboundMessage | None
    joined: tuple[str, ...] = ()


def only_files(message: InboundMessage) -> bool:
    return bool(message.attachments) and is_blank(message.body)


class LoneFiles:
    def __init__(self, wait_s: float, take_in: TakeIn) -> None:
        """``wait_s`` 0: files-only messages run at once, as any message."""
        self._wait_s = wait_s
        self._take_in = take_in
        self._closed = False
        self._waiting: dict[Key, _Waiting] = {}
        self._expired: dict[Key, _Waiting] = {}
        """Waits that ended, until their first task is routed again (alone)."""

    def gather(self, task_id: str, message: InboundMessage) -> Gathered:
        """Called for an admitted message that engages the bot, under its channel's lock."""
        key = (message.channel, message.room or message.conversation_key, message.sender_id)
        expired = self._expired.get(key)
        if expired is not None and expired.tasks[0][0] == task_id:
            del self._expired[key]
            return _together(message, expired.tasks[1:])
        if self._wait_s <= 0 or not only_files(message):
            waited = self._waiting.pop(key, None) or self._expired.pop(key, None)
            if waited is None:
                return Gathered(message)
            if waited.timer is not None:
                waited.timer.cancel()
            log.info("task %s takes the files of %d message(s)", task_id, len(waited.tasks))
            return _together(message, waited.tasks, words_last=True)
        waiting = self._waiting.setdefault(key, _Waiting())
        if any(known == task_id for known, _ in waiting.tasks):
            return Gathered(None)  # routed again while it waits (a replica's take-over)
        waiting.tasks.append((task_id, message))
        if waiting.timer is not None:
            waiting.timer.cancel()
        if not self._closed:
            # Not one of the service's jobs: a wait is no work in flight, and a shutdown
            # must not wait for it (the files are stored; the next start waits again).
            waiting.timer = asyncio.create_task(
                self._expire(key, waiting), name=f"files-wait-{task_id}"
            )
        log.info("task %s is only files: waiting %g s for the words", task_id, self._wait_s)
        return Gathered(None)

    def close(self) -> None:
        """Stop every wait (shutdown): the tasks stay stored, routed again at the next start."""
        self._closed = True
        for waiting in self._waiting.values():
            if waiting.timer is not None:
                waiting.timer.cancel()
        self._waiting.clear()
        self._expired.clear()

    async def _expire(self, key: Key, waiting: _Waiting) -> None:
        await asyncio.sleep(self._wait_s)
        if self._waiting.get(key) is not waiting:
            return
        del self._waiting[key]
        self._expired[key] = waiting
        first = waiting.tasks[0][0]
        log.info("task %s: no words came with its files; it runs alone", first)
        self._take_in(first, key[0])


def _together(
    message: InboundMessage,
    waited: list[tuple[str, InboundMessage]],
    *,
    words_last: bool = False,
) -> Gathered:
    """``message`` carrying the files of ``waited`` too, theirs first (they came first);
    ``words_last``: ``message`` is the words that came after them."""
    files = tuple(a for _, earlier in waited for a in earlier.attachments)
    attachments = files + message.attachments if words_last else message.attachments + files
    joined = tuple(task_id for task_id, _ in waited)
    return Gathered(dataclasses.replace(message, attachments=attachments), joined)
