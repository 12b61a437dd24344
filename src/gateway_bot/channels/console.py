"""The local console channel: stdin in, stdout out. The embedded default, no account needed.

The person at the terminal is the local OS user and is trusted as such. Input is read on a
daemon thread (a blocking readline cannot be cancelled, and a daemon thread does not hold
up interpreter exit); each line becomes one message. End of input calls ``on_eof``.

Its optional capabilities: a progress display (the acknowledgement, then each new step on
a line of its own) and cards, shown as numbered choices: the person types the number (or
``/approve CODE`` as anywhere). It has no rooms to join and no attachments. What it prints
is chat markdown rendered for a terminal, plain text when standard output is not one
(``channels/console_render.py``).
"""

from __future__ import annotations

import asyncio
import codecs
import getpass
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TextIO

from gateway_bot.channels.console_render import Choices, printable, terminal_text
from gateway_bot.core.channel import Submit
from gateway_bot.domain.messages import (
    Card,
    ChannelHealth,
    ChannelStatus,
    Decision,
    InboundMessage,
    JsonDict,
    Progress,
    RawMessage,
    Reply,
)

CHANNEL = "console"


def _decoded_lines(stdin: TextIO) -> Iterator[str]:
    """Lines of ``stdin``, bytes that are not in its encoding replaced (U+FFFD). Under a
    UTF-8 locale Python decodes standard input strictly: one Latin-1 byte pasted or piped
    in raised UnicodeDecodeError on the reading thread and the console went deaf."""
    raw = getattr(stdin, "buffer", None)
    if raw is None:  # already text (a StringIO in tests)
        yield from stdin
        return
    encoding = getattr(stdin, "encoding", None) or "utf-8"
    if codecs.lookup(encoding).name == "ascii":  # a bare C locale: UTF-8 is likelier
        encoding = "utf-8"
    for line in raw:
        yield line.decode(encoding, errors="replace")


class ConsoleListener:
    def __init__(
        self,
        conversation: str,
        stdin: TextIO,
        on_eof: Callable[[], None],
        choices: Choices | None = None,
    ) -> None:
        self._conversation = conversation
        self._stdin = stdin
        self._on_eof = on_eof
        self._choices = choices or Choices()
        self._status = ChannelStatus(ChannelHealth.STARTING)
        self._stopped = False

    @property
    def status(self) -> ChannelStatus:
        return self._status

    async def start(self, submit: Submit) -> None:
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[str | None] = asyncio.Queue()

        def read_lines() -> None:
            for line in _decoded_lines(self._stdin):
                loop.call_soon_threadsafe(lines.put_nowait, line)
            loop.call_soon_threadsafe(lines.put_nowait, None)

        threading.Thread(target=read_lines, name="console-stdin", daemon=True).start()
        self._pump = asyncio.create_task(self._pump_lines(lines, submit))
        self._status = ChannelStatus(ChannelHealth.CONNECTED, "reading standard input")

    async def _pump_lines(self, lines: asyncio.Queue[str | None], submit: Submit) -> None:
        while (line := await lines.get()) is not None and not self._stopped:
            text = line.rstrip("\n")
            payload = {"text": text, "conversation": self._conversation}
            # A card's number is its button, read now: the stored message says which one
            # (a restart, or a card decided meanwhile, cannot make it mean another).
            if (action := self._choices.chosen(text)) is not None:
                payload["action"] = action
            await submit(
                RawMessage(
                    channel=CHANNEL,
                    message_id=uuid.uuid4().hex,
                    sender=getpass.getuser(),
                    payload=payload,
                    received_at=time.time(),
                )
            )
        if not self._stopped:
            # Ctrl-D is how a person leaves a chat: the channel ended, nothing failed.
            self._status = ChannelStatus(ChannelHealth.STOPPED, "end of input")
            self._on_eof()

    async def stop(self) -> None:
        self._stopped = True


class ConsoleAdapter:
    name = CHANNEL
    progress_interval_s = 0.0

    def __init__(
        self,
        conversation: str,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        on_eof: Callable[[], None] = lambda: None,
    ) -> None:
        self._out = stdout or sys.stdout
        self._choices = Choices()
        self._listener = ConsoleListener(conversation, stdin or sys.stdin, on_eof, self._choices)

    @property
    def listener(self) -> ConsoleListener:
        return self._listener

    def say(self, text: str) -> None:
        """One plain line (or several), as is but for control characters."""
        self._out.write(printable(text) + "\n")
        self._out.flush()

    def show(self, prefix: str, markdown: str, suffix: str = "") -> None:
        """Chat markdown rendered for this terminal (plain when it is not one), the first
        line after ``prefix``, ``suffix`` after the last."""
        isatty = getattr(self._out, "isatty", None)
        rendered = terminal_text(markdown, tty=bool(isatty and isatty()))
        self._out.write(prefix + rendered + suffix + "\n")
        self._out.flush()

    async def authenticate_and_parse(self, raw: RawMessage) -> InboundMessage | Decision:
        user = raw.sender
        if isinstance(action := raw.payload.get("action"), str):
            return Decision(CHANNEL, action, f"console:{user}", user, raw.received_at)
        return InboundMessage(
            channel=CHANNEL,
            message_id=raw.message_id,
            sender_id=f"console:{raw.sender}",
            sender_name=raw.sender,
            body=str(raw.payload["text"]),
            conversation_key=str(raw.payload["conversation"]),
            received_at=raw.received_at,
            channel_context={"conversation": raw.payload["conversation"]},
        )

    async def send_acknowledgement(self, context: JsonDict, task_id: str, text: str) -> None:
        self.show("… ", f"{text} (task {task_id})")

    async def send_progress(self, context: JsonDict, progress: Progress) -> None:
        """Print the steps no update printed yet (the core says how many are new)."""
        for step in progress.steps[len(progress.steps) - progress.new_steps :]:
            self.show("  · ", step)

    async def send_reply(self, context: JsonDict, task_id: str, reply: Reply) -> None:
        self.show("error> " if reply.is_error else "agent> ", reply.text)
        for path in reply.files:
            self.say(f"  [file] {path}")
        if reply.usage is not None:
            self.say(f"  [{reply.usage.summary()}]")

    async def send_rejection(self, context: JsonDict, text: str) -> None:
        self.show("refused> ", text)

    async def send_card(self, context: JsonDict, card: Card) -> str:
        """The card's words, then a numbered line per button: the person types one."""
        ref, lines = self._choices.offer(card)
        self.show("[", card.title, "]")
        self.show("", card.body)
        if lines:
            self.say("\n".join([*lines, "Type the number of your choice."]))
        return ref

    async def update_card(self, context: JsonDict, card_ref: str, card: Card) -> None:
        """A decided card (no buttons left): its numbers no longer choose anything. One
        still open (more held messages on it) is shown again with its buttons under the
        same numbers."""
        lines = self._choices.reoffer(card_ref, card)
        self.show("[", card.title, "]")
        self.show("", card.body)
        if lines:
            self.say("\n".join([*lines, "Type the number of your choice."]))
