"""The email channel as the core sees it: authenticate and parse a stored mail, answer it.

An email thread is a conversation (key: the thread id in our Message-IDs and subject tags).
A mail joins a thread by In-Reply-To, then References newest first, then the
``[ID:xxxxxxxx]`` subject tag; otherwise it starts one. A thread belongs to its first
sender: anyone else writing into it is, for the approval policy, a sender the allow rules
have not admitted there (``room`` is the thread).

Unauthenticated mail (see ``auth``) is refused with AuthenticationError: the core logs it
and never answers, since the From address is exactly what a forger chose.

Exactly-once replies: the reply's Message-ID is recorded as an intent before SMTP is
dialled; ``sending`` once the server holds the whole mail but its end-of-data line, just
before that line is written; ``sent`` after the server's 250. A call that finds ``sent``
does nothing; one that finds ``intended`` sends (again: a transaction cut off before its
data ended delivered nothing); one that finds ``sending`` (the daemon died while the server
may have accepted the mail) logs it and sends nothing rather than a second reply.

Capabilities: the required core plus ``AttachmentDownloads`` and ``ConversationMail``. No
progress display (mail cannot be edited) and no card buttons: approval cards for email
senders go to the configured approval destination in chat.

``ConversationMail`` (``/mail`` in a chat conversation): the thread's key is the chat
conversation's id (its ``[ID:...]`` tag), linked to the asking identity's address
(``email_chat_links``) before the mail is sent once under the command's send key. A mail
in that thread whose authenticated sender is a linked address carries
``continues_conversation``; anyone else's is a new sender in the thread, as in any other.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from email.message import EmailMessage
from email.utils import formataddr

from gateway_bot.channels.email import compose, mime
from gateway_bot.channels.email.auth import (
    Refused,
    check_dmarc,
    check_not_automatic,
    is_allowed,
    single_sender,
)
from gateway_bot.channels.email.listener import CHANNEL, EmailListener
from gateway_bot.channels.email.oauth import TokenSource
from gateway_bot.channels.email.smtp import SmtpError, open_transaction
from gateway_bot.channels.email.store import EmailStore
from gateway_bot.config.channels import EmailChannelSettings
from gateway_bot.core.channel import AuthenticationError, MailRequest
from gateway_bot.core.fault_points import reached
from gateway_bot.core.workspaces.inbox_files import (
    InboxError,
    InboxWriter,
    safe_filename,
    size_text,
)
from gateway_bot.domain.messages import (
    Attachment,
    InboundMessage,
    JsonDict,
    RawMessage,
    Reply,
)
from gateway_bot.state.database import Database

log = logging.getLogger(__name__)

TOO_DEEP = (
    "Your mail's parts are nested too deeply to be read (mails inside mails, or parts "
    "inside parts, hundreds of levels down), so it was not read and nothing was done. "
    "Send your request again in a plain mail, with files attached directly."
)
"""The answer to a mail whose structure cannot be walked: its sender hears why."""

MAX_ATTACHMENTS = 100
"""Files saved from one mail: a mail of ten thousand tiny parts fits any size limit, and
each becomes a file in the agent's inbox."""


class EmailAdapter:
    name = CHANNEL

    def __init__(self, settings: EmailChannelSettings, database: Database) -> None:
        self._settings = settings
        self._store = EmailStore(database)
        self._tokens = TokenSource(settings) if settings.auth == "oauth2" else None
        self._listener = EmailListener(settings, self._store, self._tokens)
        self._domain = settings.address.rpartition("@")[2]
        self._send_lock = asyncio.Lock()

    @property
    def listener(self) -> EmailListener:
        return self._listener

    # -- inbound -----------------------------------------------------------------------

    async def still_allowed(self, message: InboundMessage) -> bool:
        """Still in ``allowed_senders`` (a scheduled run replays a mail parsed when the
        schedule was made). A thread continuing a chat conversation is the core's to vet."""
        if message.continues_conversation is not None:
            return True
        return is_allowed(message.sender_id, self._settings.allowed_senders)

    async def authenticate_and_parse(self, raw: RawMessage) -> InboundMessage | None:
        await self._listener.open_store()
        key = str(raw.payload["message_key"])
        data = await self._store.raw(key)
        if data is None:
            raise ValueError(f"the mail {key} is no longer stored (retention)")
        # Parsing and HTML conversion cost CPU in proportion to what the sender wrote:
        # never on the event loop, where a big mail would stall every channel.
        try:
            message = await asyncio.to_thread(mime.parse_bytes, data)
            too_deep = False
        except mime.TooDeep:  # still answered: its headers say who sent it and where
            message = await asyncio.to_thread(mime.parse_headers, data)
            too_deep = True
        try:
            sender = single_sender(message)
            check_dmarc(
                message,
                sender,
                self._settings.trusted_authserv_id,
                self._settings.allow_multiple_trusted_headers,
            )
            check_not_automatic(message, sender, self._settings.address)
        except Refused as exc:
            raise AuthenticationError(exc.sender, exc.reason) from exc
        own_id = _first(mime.message_ids(str(message.get("Message-ID") or ""))) or (
            f"<{key.removeprefix('sha256:')[:32]}@gwb.invalid>"
        )
        if await self._store.first_mail_with(sender.address, own_id, key) != key:
            log.info("%s: another copy of %s was taken in already", sender.address, own_id)
            return None  # the core completes it as "nothing to act on"
        # A mail parsed again (a retry, a restart) keeps the thread it was given; a new
        # thread's key comes from the mail's bytes, so it is the same on every parse.
        thread = (
            await self._store.thread_of(own_id)
            or await self._thread_of(message)
            or hashlib.sha256(key.encode()).hexdigest()[:8]
        )
        await self._store.remember_thread(own_id, thread)
        owner = await self._store.claim_thread(thread, sender.address)
        continues = await self._store.chat_conversation(thread, sender.address)
        subject = mime.base_subject(str(message.get("Subject") or ""))
        references = list(reversed(mime.references_newest_first(message)))
        references = [ref for ref in references if ref != own_id] + [own_id]
        context: JsonDict = {
            "to": sender.address,
            "subject": subject,
            "thread": thread,
            "in_reply_to": own_id,
            "references": references[-compose.MAX_REFERENCES :],
        }
        oversized = raw.payload.get("oversized")
        if isinstance(oversized, int):  # once, even if this parse is retried
            text = (
                f"Your mail ({size_text(oversized)}) is over the "
                f"{size_text(self._settings.max_mail_bytes)} limit for mail, so it was not "
                "read and nothing was done. Send less, or large files another way."
            )
            await self._send_once(f"oversized:{raw.message_id}", context, text, "", ())
            return None
        found = None if too_deep else await _contents(message)
        if found is None:
            await self._send_once(f"too-deep:{raw.message_id}", context, TOO_DEEP, "", ())
            return None
        attachments = tuple(
            Attachment(
                filename=part.filename,
                content_type=part.content_type,
                size=part.size,
                source_ref=f"{key}#{part.index}",
            )
            for part in found.attachments
        )
        inbound = InboundMessage(
            channel=CHANNEL,
            message_id=raw.message_id,
            sender_id=sender.address,
            sender_name=sender.name,
            body=found.body,
            conversation_key=thread,
            received_at=raw.received_at,
            channel_context=context,
            attachments=attachments,
            model_hint=mime.model_hint(mime.recipients_of(message), self._settings.address),
            sender_allowed=continues is not None
            or (
                owner == sender.address
                and is_allowed(sender.address, self._settings.allowed_senders)
            ),
            continues_conversation=continues,
            room=thread,
            room_title=f"mail thread {subject!r} of {owner}",
            is_direct=True,
            mentioned=True,
        )
        return inbound

    async def acknowledge(self, context: JsonDict, task_id: str, text: str) -> None:
        """The optional acknowledgement mail (``acknowledge: true``), once per task (a send
        intent like a reply's): the core sends it when the task is queued, so commands are
        answered instead and a held stranger's mail is acknowledged only once allowed.
        ``text`` is the core's, with the dashboard link when there is one."""
        if not self._settings.acknowledge:
            return
        body = f"{text}\n\nThe answer will come as a reply to your mail."
        await self._send_once(f"ack:{task_id}", context, body, "", ())

    async def _thread_of(self, message: EmailMessage) -> str | None:
        for msgid in mime.references_newest_first(message):
            ours = mime.thread_of_our_id(msgid)
            if ours is not None and ours.isalnum():
                return ours
            known = await self._store.thread_of(msgid)
            if known is not None:
                return known
        return mime.subject_tag(str(message.get("Subject") or ""))

    async def save_attachments(self, message: InboundMessage, inbox: InboxWriter) -> list[str]:
        saved: list[str] = []
        problems: list[str] = []
        limit = self._settings.max_attachment_bytes
        parts: list[bytes] | None = None
        if len(message.attachments) > MAX_ATTACHMENTS:
            problems.append(
                f"Your mail had {len(message.attachments)} attachments; only the first "
                f"{MAX_ATTACHMENTS} were saved."
            )
        for attachment in message.attachments[:MAX_ATTACHMENTS]:
            name = safe_filename(attachment.filename)
            if attachment.size > limit:
                problems.append(
                    f"{name} ({size_text(attachment.size)}) is over the {size_text(limit)} "
                    "limit for attachments and was not saved."
                )
                continue
            key, _, index = attachment.source_ref.rpartition("#")
            if parts is None:
                data = await self._store.raw(key)
                if data is None:
                    problems.append(f"{name} is no longer stored and was not saved.")
                    continue
                parts = await asyncio.to_thread(mime.all_part_bytes, data)
            try:
                saved.append(await inbox.save(name, parts[int(index)]))
            except (InboxError, IndexError, ValueError) as exc:
                problems.append(f"{name} could not be saved: {exc}.")
        if problems:  # once per mail; the task runs with what was saved either way
            try:
                await self._send_once(
                    f"files:{message.message_id}",
                    message.channel_context,
                    " ".join(problems),
                    "",
                    (),
                )
            except Exception:
                log.warning("could not tell %s about its files", message.sender_id, exc_info=True)
        return saved

    # -- a chat conversation continued by mail ---------------------------------------

    async def mail_conversation(self, request: MailRequest) -> str:
        """Open the thread of a chat conversation for ``request.address`` and mail it the
        latest reply, once per send key. The link is written first: a reply can only come
        after the mail, and a link whose mail failed admits nobody the owner did not map."""
        await self._listener.open_store()
        thread = request.conversation_id
        if not (thread.isascii() and thread.isalnum() and 6 <= len(thread) <= 32):
            raise ValueError(f"{thread!r} cannot be a mail thread's tag")
        await self._store.link_chat(thread, request.address, request.conversation_id)
        await self._store.claim_thread(thread, request.address.lower())
        files, problems = await asyncio.to_thread(
            compose.read_files, request.files, self._settings.max_attachment_bytes
        )
        text = request.text + ("\n\n" + " ".join(problems) if problems else "")
        subject = mime.base_subject(request.subject) or "(no subject)"
        context: JsonDict = {
            "to": request.address,
            "subject": subject,
            "thread": thread,
            "opens_thread": True,
        }
        await self._send_once(request.send_key, context, text, "", tuple(files))
        return compose.opening_subject(thread, subject)

    # -- outbound ----------------------------------------------------------------------

    async def send_reply(self, context: JsonDict, task_id: str, reply: Reply) -> None:
        files, problems = await asyncio.to_thread(
            compose.read_files, reply.files, self._settings.max_attachment_bytes
        )
        text = reply.text
        if problems:
            text += "\n\n" + " ".join(problems)
        footer = reply.usage.summary() if reply.usage else ""
        await self._send_once(f"reply:{task_id}", context, text, footer, tuple(files))

    async def send_rejection(self, context: JsonDict, text: str) -> None:
        """A notice (a refusal, a command's answer, a file problem): sent once per call, no
        intent kept; it is not a task's reply."""
        outgoing = self._outgoing(context)
        message_id = compose.new_message_id(outgoing.thread, self._domain)
        await self._send(compose.build_mail(outgoing, message_id, text), outgoing.recipient)
        await self._store.remember_thread(message_id, outgoing.thread)

    async def _send_once(
        self,
        send_key: str,
        context: JsonDict,
        text: str,
        footer: str,
        files: tuple[tuple[str, bytes], ...],
    ) -> None:
        outgoing = self._outgoing(context)
        record = await self._store.intend_send(
            send_key, compose.new_message_id(outgoing.thread, self._domain)
        )
        if record.state == "sent":
            return
        if record.state == "sending":
            log.warning(
                "%s (%s) was being sent when the daemon stopped; the server may have it, so "
                "it is not sent again",
                send_key,
                record.message_id,
            )
            return
        await self._store.remember_thread(record.message_id, outgoing.thread)
        mail = compose.build_mail(outgoing, record.message_id, text, footer, files)
        await self._send(mail, outgoing.recipient, send_key)

    async def _send(self, mail: EmailMessage, recipient: str, send_key: str = "") -> None:
        async with self._send_lock:
            try:
                settings = self._settings
                transaction = await asyncio.to_thread(
                    open_transaction, settings, settings.address, recipient, self._tokens
                )
            except SmtpError as exc:  # refused or unreachable: the channel's health says so
                self._listener.smtp_outcome(str(exc))
                raise
            try:  # nothing is delivered until the end-of-data line: a crash here resends
                await asyncio.to_thread(transaction.send_content, mail)
            except SmtpError as exc:
                self._listener.smtp_outcome(str(exc))
                raise
            if send_key:
                try:
                    await self._store.mark_send(send_key, "sending")
                except BaseException:
                    await asyncio.to_thread(transaction.close)
                    raise
            try:
                await asyncio.to_thread(transaction.finish)
            except SmtpError as exc:
                self._listener.smtp_outcome(str(exc))
                if send_key and not exc.uncertain:  # refused, so not delivered: try again
                    await self._store.mark_send(send_key, "intended")
                raise
            self._listener.smtp_outcome(None)
            reached("email_smtp_accepted")
            if send_key:
                await self._store.mark_send(send_key, "sent")

    def _outgoing(self, context: JsonDict) -> compose.Outgoing:
        return compose.Outgoing(
            sender=formataddr(("gateway-bot", self._settings.address)),
            recipient=str(context["to"]),
            subject=str(context.get("subject") or "(no subject)"),
            thread=str(context["thread"]),
            in_reply_to=str(context.get("in_reply_to") or ""),
            references=tuple(str(ref) for ref in context.get("references") or ()),
            opens_thread=bool(context.get("opens_thread")),
        )


async def _contents(message: EmailMessage) -> mime.Contents | None:
    """Text and attachments, off the event loop; None when the parts nest too deeply."""
    try:
        return await asyncio.to_thread(mime.contents, message)
    except mime.TooDeep:
        return None


def _first(items: list[str]) -> str | None:
    return items[0] if items else None
