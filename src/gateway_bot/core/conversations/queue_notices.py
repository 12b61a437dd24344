"""What a task's sender hears from the scheduler before the reply: the acknowledgement
("Working on it…", "Queued behind N task(s).", with the conversation's dashboard link), the
refusal of a message its conversation has no room for, and (``core/host_waits``) that the
task waits for its host.

Apart from the scheduler (``core/conversations/queue.py`` had grown past 400 lines), which decides
what runs when; here is only how a notice goes out. Each is best effort: a job of its own,
retried by the channel policy, then given up (logged); people may miss a notice, and no
notice ever decides whether a task runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from gateway_bot.core.channel import (
    Acknowledges,
    ChannelAdapter,
    PreparesAcknowledgement,
    ProgressDisplay,
)
from gateway_bot.core.jobs import Jobs
from gateway_bot.core.retries import RetryPolicy, call_channel
from gateway_bot.domain.messages import InboundMessage

log = logging.getLogger(__name__)


class QueueNotices:
    def __init__(
        self,
        adapters: Mapping[str, ChannelAdapter],
        jobs: Jobs,
        policy: RetryPolicy,
        conversation_link: Callable[[str], str | None] | None,
        note_acknowledged: Callable[[str, float], Awaitable[None]] | None = None,
    ) -> None:
        """``conversation_link``: a conversation id's page on the dashboard (or None), which
        the acknowledgement then ends with. ``note_acknowledged(task id, when)``: records
        when an acknowledgement went out (the task's waterfall)."""
        self._adapters = adapters
        self._jobs = jobs
        self._policy = policy
        self._conversation_link = conversation_link
        self._note_acknowledged = note_acknowledged

    def tell(
        self,
        what: str,
        send: Callable[[], Awaitable[None]],
        sent: Callable[[], Awaitable[None]] | None = None,
    ) -> asyncio.Task[None]:
        """A best-effort send in a job of its own: retried by the policy, then given up
        (logged). People may miss a notice; what a task shows waits for it at most
        ``ACK_WAIT_S`` (``task_gates``). ``sent``: a record of its own once it went out (a
        failure of it is logged, never a reason to send again)."""

        async def attempt() -> None:
            try:
                await call_channel(what, send, self._policy)
            except Exception as exc:
                log.warning("%s: given up (%s)", what, exc)
                return
            if sent is not None:
                try:
                    await sent()
                except Exception as exc:
                    log.warning("%s: sent, not recorded (%r)", what, exc)

        return self._jobs.spawn(attempt(), name=what)

    async def prepare_acknowledgement(self, task_id: str, message: InboundMessage) -> None:
        """While the message's flush runs: the channel's own record for the acknowledgement
        to come (``PreparesAcknowledgement``). Only a help: if it fails, the send writes it."""
        adapter = self._adapters[message.channel]
        if not isinstance(adapter, PreparesAcknowledgement):
            return
        try:
            await adapter.prepare_acknowledgement(message.channel_context, task_id)
        except Exception as exc:
            log.warning("task %s: preparing the acknowledgement failed (%r)", task_id, exc)

    def refuse(self, task_id: str, message: InboundMessage, text: str) -> None:
        """Tell the sender that the message was not queued, and why (``text``)."""
        adapter, context = self._adapters[message.channel], message.channel_context
        self.tell(
            f"{message.channel}: refusing task {task_id}",
            lambda: adapter.send_rejection(context, text),
        )

    def acknowledge(
        self, task_id: str, message: InboundMessage, conversation_id: str, ahead: int
    ) -> asyncio.Task[None] | None:
        """Send the acknowledgement of a queued task (``ahead``: the tasks before it in its
        conversation); None for a channel that shows none (neither a ``ProgressDisplay``
        nor ``Acknowledges``: its people see the reply only)."""
        adapter, context = self._adapters[message.channel], message.channel_context
        ack = f"Queued behind {ahead} task(s)." if ahead else "Working on it…"
        link = self._conversation_link(conversation_id) if self._conversation_link else None
        if link:
            ack = f"{ack} {link}"
        send: Callable[[], Awaitable[None]]
        if isinstance(adapter, ProgressDisplay):
            display = adapter
            send = lambda: display.send_acknowledgement(context, task_id, ack)  # noqa: E731
        elif isinstance(adapter, Acknowledges):
            notice = adapter
            send = lambda: notice.acknowledge(context, task_id, ack)  # noqa: E731
        else:
            return None
        note = self._note_acknowledged
        sent = None if note is None else (lambda: note(task_id, time.time()))
        return self.tell(f"{message.channel}: acknowledging task {task_id}", send, sent)
