"""In-memory stand-ins for the core's edges: a chat channel and an agent.

``FakeChannel`` implements the ChannelAdapter protocol and every optional capability the
way a real channel behaves from the core's side: it parses what its listener heard, records
every message it was asked to send (what a person in that room would see), and can be told
to fail or hang a kind of call in a room, the way a homeserver or Slack does when they are
down, rate limiting or slow. ``BareChannel`` is the same with only the required core (no
progress display, buttons, rooms or attachments), the way an email channel is.
``FakeAgent`` is the task executor without claude: it echoes the prompt, and words in the
prompt make it hold (``hold:NAME`` until released), report a step or crash.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gateway_bot.agents.base import OnEvent, ToolUseEvent
from gateway_bot.core.actions.approvals import ActionDecision, ActionRequest, AskAction
from gateway_bot.core.channel import AttachmentDownloads, AuthenticationError, Submit
from gateway_bot.core.conversations.executor import TaskResult
from gateway_bot.core.conversations.prompts import build_prompt
from gateway_bot.core.schedules.request_file import RequestFile
from gateway_bot.core.workspaces.inbox_files import InboxWriter
from gateway_bot.domain.lifecycle import CompletionReason
from gateway_bot.domain.messages import (
    Attachment,
    Card,
    ChannelHealth,
    ChannelStatus,
    Decision,
    InboundMessage,
    JsonDict,
    Progress,
    RawMessage,
    Reply,
    RoomInvite,
)
from gateway_bot.domain.records import ConversationRecord
from gateway_bot.sandbox.base import HostUnreachable, SandboxPaths

BOT = "@bot"


@dataclass(frozen=True)
class Sent:
    """One thing the channel put in front of people."""

    kind: str
    """ack, progress, done (the progress display closed), reply, rejection, card,
    card_update, join, leave."""
    room: str
    text: str
    task_id: str = ""
    ref: str = ""


@dataclass
class Fault:
    """Calls of ``kind`` (in ``room``, or anywhere) fail with ``error`` ``times`` more times
    (for ever when None), or hang until ``release()`` when ``hang`` is set."""

    kind: str
    room: str | None
    times: int | None
    error: Callable[[], BaseException]
    hang: asyncio.Event | None = None
    hits: int = 0

    def matches(self, kind: str, room: str) -> bool:
        active = self.times is None or self.times > 0
        return active and self.kind == kind and self.room in (None, room)

    def release(self) -> None:
        assert self.hang is not None
        self.hang.set()


class FakeListener:
    def __init__(self) -> None:
        self.submit: Submit | None = None
        self.status = ChannelStatus(ChannelHealth.CONNECTED, "fake")

    async def start(self, submit: Submit) -> None:
        self.submit = submit

    async def stop(self) -> None:
        self.submit = None


class BareChannel:
    """Only the required core of a channel: parse, reply, notice."""

    def __init__(self, name: str = "fake", allowed: tuple[str, ...] = ("alice", "bob")) -> None:
        self._name = name
        self.allowed = set(allowed)
        self._listener = FakeListener()
        self.sent: list[Sent] = []
        self.faults: list[Fault] = []
        self.calls: collections.Counter[tuple[str, str]] = collections.Counter()
        self.parsed: list[str] = []
        self._refs = itertools.count(1)
        self.joined: set[str] = set()

    # -- what a test does -----------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def listener(self) -> FakeListener:
        return self._listener

    def fail(
        self,
        kind: str,
        *,
        room: str | None = None,
        times: int | None = None,
        error: Callable[[], BaseException] = lambda: ConnectionError("the homeserver is down"),
    ) -> Fault:
        fault = Fault(kind, room, times, error)
        self.faults.append(fault)
        return fault

    def hang(self, kind: str, *, room: str | None = None) -> Fault:
        fault = Fault(kind, room, None, lambda: AssertionError("unused"), asyncio.Event())
        self.faults.append(fault)
        return fault

    def mend(self) -> None:
        for fault in self.faults:
            if fault.hang is not None:
                fault.hang.set()
        self.faults.clear()

    def seen(self, room: str, kind: str | None = None) -> list[Sent]:
        return [s for s in self.sent if s.room == room and kind in (None, s.kind)]

    def texts(self, room: str, kind: str | None = None) -> list[str]:
        return [s.text for s in self.seen(room, kind)]

    # -- the channel protocol ----------------------------------------------------------------

    async def _call(self, kind: str, room: str) -> None:
        self.calls[kind, room] += 1
        for fault in self.faults:
            if fault.matches(kind, room):
                fault.hits += 1
                if fault.hang is not None:
                    await fault.hang.wait()
                    return
                if fault.times is not None:
                    fault.times -= 1
                raise fault.error()

    async def authenticate_and_parse(
        self, raw: RawMessage
    ) -> InboundMessage | Decision | RoomInvite | None:
        payload = raw.payload
        room = str(payload.get("room", ""))
        self.parsed.append(raw.message_id)
        await self._call("parse", room)
        kind = payload.get("kind", "message")
        if kind == "click":
            return Decision(self._name, str(payload["action"]), raw.sender, raw.sender, time.time())
        if kind == "invite":
            return RoomInvite(self._name, room, f"Room {room}", raw.sender, raw.sender, time.time())
        if kind == "nothing":
            return None
        if kind == "refuse":
            raise AuthenticationError(raw.sender, "not a member of the room")
        if kind == "garbled":
            # What a channel's parser does with a field of the wrong type.
            return payload["files"][0].get("name")  # type: ignore[no-any-return]
        text = str(payload["text"])
        mentioned = text.startswith(BOT)
        thread = payload.get("thread")
        files = tuple(Attachment(str(name)) for name in payload.get("files", ()))
        return InboundMessage(
            channel=self._name,
            message_id=raw.message_id,
            sender_id=raw.sender,
            sender_name=raw.sender.title(),
            body=text.removeprefix(BOT).lstrip(" ") if mentioned else text,
            conversation_key=f"{room}|{thread}" if thread else room,
            received_at=raw.received_at,
            channel_context={"room": room},
            sender_allowed=raw.sender in self.allowed,
            room=room,
            room_title=f"Room {room}",
            is_direct=bool(payload.get("direct", True)),
            mentioned=mentioned,
            attachments=files,
        )

    async def _send(self, kind: str, context: JsonDict, text: str, **more: str) -> None:
        room = str(context.get("room", ""))
        await self._call(kind, room)
        self.sent.append(Sent(kind, room, text, **more))

    async def send_reply(self, context: JsonDict, task_id: str, reply: Reply) -> None:
        await self._send("reply", context, reply.text, task_id=task_id)

    async def send_rejection(self, context: JsonDict, text: str) -> None:
        await self._send("rejection", context, text)


class FakeChannel(BareChannel):
    """A channel with every optional capability (as Slack has)."""

    progress_interval_s = 1.0

    async def still_allowed(self, message: InboundMessage) -> bool:
        await self._call("recheck", message.room)
        return message.sender_id in self.allowed

    async def send_acknowledgement(self, context: JsonDict, task_id: str, text: str) -> None:
        await self._send("ack", context, text, task_id=task_id)

    async def send_progress(self, context: JsonDict, progress: Progress) -> None:
        """Live steps; the closing update shows the outcome and the finished steps, on a
        display this channel opened (an acknowledgement) only."""
        task_id = progress.task_id
        if progress.outcome is None:
            await self._send("progress", context, " / ".join(progress.steps), task_id=task_id)
        elif any(s.kind == "ack" and s.task_id == task_id for s in self.sent):
            word = "Stopped" if progress.outcome.stopped else "Done"
            text = " / ".join((word, *progress.steps))
            await self._send("done", context, text, task_id=task_id)

    async def save_attachments(self, message: InboundMessage, inbox: InboxWriter) -> list[str]:
        return [a.filename for a in message.attachments]

    async def send_card(self, context: JsonDict, card: Card) -> str:
        ref = f"card-{next(self._refs)}"
        await self._send("card", context, f"{card.title}\n{card.body}", ref=ref)
        return ref

    async def update_card(self, context: JsonDict, card_ref: str, card: Card) -> None:
        await self._send("card_update", context, f"{card.title}\n{card.body}", ref=card_ref)

    async def join_room(self, room: str) -> None:
        await self._send("join", {"room": room}, "")
        self.joined.add(room)

    async def leave_room(self, room: str) -> None:
        await self._send("leave", {"room": room}, "")
        self.joined.discard(room)


AGENT_PATHS = SandboxPaths("/workspace", "/home", "/inbox", "/outbox", "/storage")


@dataclass
class FakeAgent:
    """The executor without an agent: replies ``Echo: <prompt>``."""

    runs: list[InboundMessage] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)
    """What the agent read, as the executor builds it (``core/prompts.build_prompt``)."""
    running: set[str] = field(default_factory=set)
    peak: int = 0
    cancelled: list[str] = field(default_factory=list)
    schedule_requests: list[RequestFile] = field(default_factory=list)
    """What a run whose message says ``propose`` left in outbox/schedule.json, in order."""
    _gates: dict[str, asyncio.Event] = field(default_factory=dict)
    ask_action: AskAction | None = None
    """Action approvals' ``ask``: a word ``ask:CMD`` asks to run ``CMD`` (underscores for
    spaces), ``question:A|B`` asks a question with options A and B; the reply says what was
    decided."""
    decisions: list[ActionDecision] = field(default_factory=list)
    host_down: str | None = None
    """While set, every run fails as the sandbox does when the context's host (this name)
    does not answer."""

    def gate(self, name: str) -> asyncio.Event:
        return self._gates.setdefault(name, asyncio.Event())

    def release(self, name: str) -> None:
        self.gate(name).set()

    def bodies(self) -> list[str]:
        return [m.body for m in self.runs]

    async def execute(
        self,
        task_id: str,
        conversation: ConversationRecord,
        message: InboundMessage,
        adapter: AttachmentDownloads,
        on_event: OnEvent,
    ) -> TaskResult:
        if self.host_down is not None:
            raise HostUnreachable(self.host_down, f"unix:///run/{self.host_down}/podman.sock")
        self.runs.append(message)
        saved = (
            await adapter.save_attachments(message, InboxWriter(Path("/nonexistent")))
            if message.attachments
            else []
        )
        self.prompts.append(build_prompt(message, AGENT_PATHS, saved, "UTC"))
        self.running.add(task_id)
        self.peak = max(self.peak, len(self.running))
        asked: list[ActionDecision] = []
        try:
            for word in message.body.split():
                if word.startswith(("ask:", "question:")) and self.ask_action is not None:
                    decided = await self.ask_action(_action_request(task_id, conversation.id, word))
                    self.decisions.append(decided)
                    asked.append(decided)
                elif word.startswith("hold:"):
                    await self.gate(word.removeprefix("hold:")).wait()
                elif word == "step":
                    await on_event(ToolUseEvent("Bash", "ran a step"))
                elif word == "crash":
                    raise RuntimeError("the agent fell over")
        except asyncio.CancelledError:
            self.cancelled.append(task_id)
            raise
        finally:
            self.running.discard(task_id)
        text = f"Echo: {message.body}"
        for decision in asked:
            text += f" [{'allowed' if decision.allowed else 'denied'}: {decision.reason}"
            text += f"; answer: {decision.answer}]" if decision.answer else "]"
        if message.context:
            text += " [context: " + " | ".join(message.context) + "]"
        request = None
        if "propose" in message.body.split() and self.schedule_requests:
            request = self.schedule_requests.pop(0)
        return TaskResult(Reply(text=text), CompletionReason.SUCCESS, request)


def _action_request(task_id: str, conversation_id: str, word: str) -> ActionRequest:
    kind, _, what = word.partition(":")
    if kind == "question":
        options = tuple(what.split("|"))
        return ActionRequest(
            conversation_id, task_id, "question", "Which one?", "Which one?", "", "", options
        )
    command = what.replace("_", " ")
    return ActionRequest(
        conversation_id,
        task_id,
        "tool",
        command,
        f"$ {command}\n(in /workspace)",
        'Bash "git push*": ask',
        f"tool Bash {command}",
    )
