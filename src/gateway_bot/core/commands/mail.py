"""A chat conversation continued by mail: ``/mail``, the check on replies, the copy in chat.

``/mail`` in a chat conversation (Matrix, Slack, console) sends the conversation's latest
reply to the sender's address in ``access.identities``, through the channel that offers
``ConversationMail`` (email). That channel opens a thread tagged with the conversation's id
and remembers it belongs to this conversation and to that address. A reply to it from that
address, DMARC-authenticated, comes back as a message of the mail channel carrying
``continues_conversation``; it joins the chat conversation (same row: workspace, agent
session, container), its reply goes back by mail, and the chat room gets a copy under a
one-line note that the conversation continued by mail.

Why the core checks the claim again: the identity map is the owner's word, so a message
continues a chat conversation only while its sender is still mapped, by the channel that
can mail, to an identity that also has an id on the conversation's channel. A claim that
fails the check is not dropped silently into the chat conversation, nor run as an allowed
sender elsewhere: the message becomes an unknown sender's (``sender_allowed`` False) and
meets the normal approval policy in its own thread.

Exactly once: the mail's send key is the ``/mail`` task's id (the channel records the
intent before SMTP, so a command re-run after a crash never mails twice); the chat copy is
sent with the mail task's id through the chat channel's ``send_reply``, whose sends are
idempotent by task id (Matrix txn ids, Slack's post records), after the mail reply was
delivered and before the task completes, so a crash in between repeats it harmlessly.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping

from gateway_bot.config.access import AccessSettings
from gateway_bot.core.channel import ChannelAdapter, ConversationMail, MailRequest
from gateway_bot.core.commands.parse import UnknownCommand, parse_command
from gateway_bot.core.retries import DEFAULT_POLICY, RetryPolicy, call_channel
from gateway_bot.domain.lifecycle import TaskState
from gateway_bot.domain.messages import InboundMessage, JsonDict, Reply
from gateway_bot.domain.records import ConversationRecord
from gateway_bot.state.store import Store

log = logging.getLogger(__name__)

NOTE_QUOTE_CHARS = 120
"""How much of the mail the chat note quotes (its first line)."""
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]+")


class ConversationMailer:
    def __init__(
        self,
        store: Store,
        adapters: Mapping[str, ChannelAdapter],
        access: AccessSettings,
        policy: RetryPolicy = DEFAULT_POLICY,
    ) -> None:
        self._store = store
        self._adapters = adapters
        self._access = access
        self._policy = policy

    def _mail_channel(self) -> ConversationMail | None:
        return next((a for a in self._adapters.values() if isinstance(a, ConversationMail)), None)

    # -- /mail ---------------------------------------------------------------------------

    async def command(
        self, conversation: ConversationRecord, message: InboundMessage, task_id: str
    ) -> str:
        """Answer ``/mail``: mail the conversation's latest reply to the sender, or say
        clearly why not."""
        if isinstance(self._adapters.get(message.channel), ConversationMail):
            return "This conversation is already by mail: reply to the mail to continue it."
        identity = self._access.identity_of(message.channel, message.sender_id)
        if identity is None or identity.email is None:
            return (
                f"/mail sends this conversation to your email address, but {message.sender_id} "
                "has none in the owner's identity map (access.identities). Ask an owner to "
                "add you."
            )
        mailer = self._mail_channel()
        if mailer is None:
            return "No channel here can send mail (channels.email is not set up), so /mail cannot."
        latest = await self._latest_reply(conversation.id)
        if latest is None:
            return "Nothing to mail yet: this conversation has no reply."
        where = _one_line(message.room_title or message.room or conversation.channel_key, 80)
        request = MailRequest(
            conversation_id=conversation.id,
            address=identity.email,
            subject=f"Conversation {conversation.id} from {conversation.channel}: {where}",
            text=(
                f"This is conversation {conversation.id} from {conversation.channel} "
                f"({where}), continued by mail as you asked. Reply to this mail to continue "
                "it: the same workspace, agent session and container.\n\n"
                f"The latest reply:\n\n{latest.text}"
            ),
            files=latest.files,
            send_key=f"mail:{task_id}",
        )
        try:
            subject = await mailer.mail_conversation(request)
        except Exception as exc:
            log.warning("/mail for %s failed: %r", conversation.id, exc)
            return (
                f"The mail to {identity.email} could not be sent ({type(exc).__name__}: "
                f"{exc}). Try /mail again later."
            )
        return (
            f"Mailed the latest reply to {identity.email} (subject “{subject}”). A reply to "
            "that mail continues this conversation; its answer comes by mail and here."
        )

    async def _latest_reply(self, conversation_id: str) -> Reply | None:
        """The agent's latest reply the user has seen. Seen means delivered, not completed:
        a task completes only after its progress display is closed (another round trip),
        and a user who types /mail the moment the reply appears must get that reply. A
        command's answer (a /status, an earlier /mail) is not the agent's reply."""
        seen = await self._store.conversation_tasks(
            conversation_id, [TaskState.EXECUTING, TaskState.COMPLETED]
        )
        for task in reversed(seen):
            if task.reply is None or task.reply.is_error or not task.reply_delivered:
                continue
            if task.parsed is not None and _is_command(task.parsed.body):
                continue
            return task.reply
        return None

    # -- replies by mail -----------------------------------------------------------------

    async def conversation_of(self, message: InboundMessage) -> ConversationRecord | None:
        """The chat conversation ``message`` continues, if its claim holds: it came from a
        channel that can mail, from a mapped identity that also has an id on the
        conversation's channel. None for every other message."""
        claimed = message.continues_conversation
        if not claimed or not isinstance(self._adapters.get(message.channel), ConversationMail):
            return None
        identity = self._access.identity_of(message.channel, message.sender_id)
        if identity is None:
            return None
        try:
            conversation = await self._store.get_conversation(claimed)
        except KeyError:
            return None
        if conversation.channel == message.channel or identity.on(conversation.channel) is None:
            return None
        return conversation

    async def vetted(self, message: InboundMessage) -> InboundMessage:
        """``message`` as routing may trust it: a continuation claim that does not hold is
        dropped, and its sender treated as unknown in the mail thread (approval policy)."""
        if message.continues_conversation is None or await self.conversation_of(message):
            return message
        log.warning(
            "%s from %s claims conversation %s, which it may not continue: treated as an "
            "unknown sender",
            message.channel,
            message.sender_id,
            message.continues_conversation,
        )
        return dataclasses.replace(message, continues_conversation=None, sender_allowed=False)

    async def copy_to_chat(self, task_id: str, message: InboundMessage, reply: Reply) -> None:
        """After a continued conversation's reply went out by mail: the chat room gets a
        one-line note and the reply (its channel's idempotent ``send_reply``, keyed by the
        task). Commands' answers (no conversation) stay in the mail. Best effort: a chat
        channel that stays down loses the copy, never the mail."""
        if message.continues_conversation is None:
            return
        try:
            task = await self._store.get_task(task_id)
            if task.conversation_id != message.continues_conversation:
                return
            conversation = await self._store.get_conversation(task.conversation_id)
            adapter = self._adapters.get(conversation.channel)
            context = await self._chat_context(conversation)
        except Exception as exc:  # never keeps the mail task from completing
            log.warning("task %s: the copy in chat was not sent (%r)", task_id, exc)
            return
        if adapter is None or context is None:
            log.warning("task %s: no way back into %s's chat room", task_id, conversation.id)
            return
        asked = next((line for line in message.body.splitlines() if line.strip()), "")
        identity = self._access.identity_of(message.channel, message.sender_id)
        # The room knows its people by name or chat id; their address stays out of it.
        who = (identity.name or identity.on(conversation.channel)) if identity else None
        quote = _one_line(asked, NOTE_QUOTE_CHARS)
        note = f"✉️ Continued by mail: {who or 'the person who asked'} wrote “{quote}”"
        copy = dataclasses.replace(reply, text=f"{note}\n\n{reply.text}")
        chat = adapter
        try:
            await call_channel(
                f"{conversation.channel}: copying mail task {task_id} into the chat",
                lambda: chat.send_reply(context, task_id, copy),
                self._policy,
            )
        except Exception as exc:
            log.warning("task %s: the copy in chat was not sent (%r)", task_id, exc)

    async def _chat_context(self, conversation: ConversationRecord) -> JsonDict | None:
        """Where the conversation's chat room is answered: the channel context of its latest
        message from that channel."""
        tasks = await self._store.conversation_tasks(
            conversation.id,
            [TaskState.COMPLETED, TaskState.UNDELIVERED, TaskState.EXECUTING, TaskState.PENDING],
        )
        for task in sorted(tasks, key=lambda t: t.created_at, reverse=True):
            if task.channel == conversation.channel and task.parsed is not None:
                return task.parsed.channel_context
        return None


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(_UNPRINTABLE.sub(" ", text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _is_command(body: str) -> bool:
    try:
        return parse_command(body) is not None
    except UnknownCommand:
        return True
