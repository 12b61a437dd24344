"""``/mail`` in the fast tier: a chat channel and a mail channel (fakes) around the real
service and store. What a person is told when /mail cannot work, what the mail channel is
asked to send, which conversation a mail reply joins, and the claims the core refuses."""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from gateway_bot.config.access import AccessSettings
from gateway_bot.core.channel import MailRequest
from gateway_bot.core.service import GatewayService
from gateway_bot.domain.messages import InboundMessage, RawMessage
from gateway_bot.domain.records import TaskRecord
from gateway_bot.state.sql_store import SqlStore
from tests.core.conftest import DEADLINE_S, FAST
from tests.core.fakes import BareChannel, FakeAgent, FakeChannel

ALICE_MAIL = "alice@example.test"


def _claiming(parsed: Any, raw: RawMessage) -> Any:
    """A message whose payload claims (``continues``) the chat conversation it continues,
    with its sender allowed, as the email channel parses a linked thread's mail."""
    claim = raw.payload.get("continues")
    if not isinstance(parsed, InboundMessage) or claim is None:
        return parsed
    return dataclasses.replace(parsed, continues_conversation=claim, sender_allowed=True)


class FakeMail(BareChannel):
    """A mail channel (``ConversationMail``)."""

    def __init__(self) -> None:
        super().__init__("email", allowed=())
        self.requests: list[MailRequest] = []

    async def mail_conversation(self, request: MailRequest) -> str:
        await self._call("mail", request.address)
        self.requests.append(request)
        return f"[ID:{request.conversation_id}] {request.subject}"

    async def authenticate_and_parse(self, raw: RawMessage) -> Any:
        return _claiming(await super().authenticate_and_parse(raw), raw)


class ClaimingChat(FakeChannel):
    """A chat channel that (wrongly) claims conversations too: the core must not listen."""

    async def authenticate_and_parse(self, raw: RawMessage) -> Any:
        return _claiming(await super().authenticate_and_parse(raw), raw)


class Gateway:
    def __init__(self, tmp_path: Path, access: dict[str, Any], *, mail: bool = True) -> None:
        self.store = SqlStore(tmp_path / "state.db")
        self.chat = ClaimingChat("matrix")
        self.mail = FakeMail()
        self.agent = FakeAgent()
        self.access = AccessSettings.model_validate(access)
        self.with_mail = mail
        self.service: GatewayService | None = None
        self._ids = itertools.count(1)

    async def start(self) -> None:
        if self.service is None and not getattr(self, "_opened", False):
            await self.store.open()
            self._opened = True
        adapters: dict[str, Any] = {"matrix": self.chat}
        if self.with_mail:
            adapters["email"] = self.mail
        self.service = GatewayService(
            self.store,
            adapters,
            self.agent,
            access=self.access,
            timezone="UTC",
            max_concurrent_tasks=4,
            max_pending_per_conversation=3,
            retry_policy=FAST,
            sweep_interval_s=0.05,
        )
        await self.service.start()

    async def stop(self) -> None:
        if self.service is not None:
            await self.service.shutdown(0.0)
            self.service = None

    async def hear(self, channel: BareChannel, sender: str, **payload: Any) -> str:
        submit = channel.listener.submit
        assert submit is not None
        message_id = f"m{next(self._ids)}"
        raw = RawMessage(channel.name, message_id, sender, {"room": "dm", **payload}, time.time())
        assert await submit(raw)
        return message_id

    async def task(self, channel: str, message_id: str) -> TaskRecord:
        row = await self.store.database.fetch_one(
            "SELECT task_id FROM inbound_messages WHERE channel = ? AND message_id = ?",
            (channel, message_id),
        )
        assert row is not None
        return await self.store.get_task(str(row[0]))

    async def until(self, check: Callable[[], Any], what: str) -> Any:
        deadline = time.monotonic() + DEADLINE_S
        while not (result := check()):
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await _sleep()
        return result

    async def done(self, channel: str, message_id: str) -> TaskRecord:
        deadline = time.monotonic() + DEADLINE_S
        while (task := await self.task(channel, message_id)).state.value != "completed":
            assert time.monotonic() < deadline, f"{message_id} is {task.state.value}"
            await _sleep()
        return task

    async def chat_says(self, text: str, sender: str = "alice") -> str:
        return await self.hear(self.chat, sender, text=text)

    async def answer(self, text: str, sender: str = "alice") -> str:
        """The chat's answer to ``text`` (a command)."""
        before = len(self.chat.texts("dm", "reply"))
        await self.chat_says(text, sender)
        replies = await self.until(
            lambda: self.chat.texts("dm", "reply")[before:], f"an answer to {text}"
        )
        return str(replies[0])


async def _sleep() -> None:
    import asyncio

    await asyncio.sleep(0.005)


IDENTITIES = [
    {"name": "Alice", "matrix": "alice", "email": ALICE_MAIL},
    {"name": "Mail-only Mo", "email": "mo@example.test"},
]
ACCESS = {
    "owners": {"matrix": ["owner"]},
    "approval_destination": {"channel": "matrix", "context": {"room": "owners"}},
    "identities": IDENTITIES,
}


@pytest.fixture
async def make_gateway(tmp_path: Path) -> AsyncIterator[Callable[..., Gateway]]:
    made: list[Gateway] = []

    def make(access: dict[str, Any] = ACCESS, **more: Any) -> Gateway:
        directory = tmp_path / f"gw-{len(made)}"
        directory.mkdir()
        made.append(Gateway(directory, access, **more))
        return made[-1]

    yield make
    for gateway in made:
        await gateway.stop()
        gateway.chat.mend()
        await gateway.store.close()


async def _conversation_with_a_reply(gw: Gateway) -> str:
    asked = await gw.chat_says("remember heron")
    return str((await gw.done("matrix", asked)).conversation_id)


async def test_mail_sends_the_latest_reply_and_a_reply_by_mail_continues_the_conversation(
    make_gateway: Callable[..., Gateway],
) -> None:
    gw = make_gateway()
    await gw.start()
    conversation = await _conversation_with_a_reply(gw)

    answer = await gw.answer("/mail")
    assert answer.startswith(f"Mailed the latest reply to {ALICE_MAIL}")
    [request] = gw.mail.requests
    assert request.conversation_id == conversation
    assert request.address == ALICE_MAIL
    assert "Echo: remember heron" in request.text
    mail_task = (await gw.store.list_tasks())[-1]
    assert request.send_key == f"mail:{mail_task.id}", "one send per /mail task"

    asked = await gw.hear(gw.mail, ALICE_MAIL, text="which word?", continues=conversation)
    task = await gw.done("email", asked)
    assert task.conversation_id == conversation, "the chat conversation's row, not a new one"
    assert gw.mail.texts("dm", "reply") == ["Echo: which word?"]
    copy = gw.chat.texts("dm", "reply")[-1]
    assert copy == "✉️ Continued by mail: Alice wrote “which word?”\n\nEcho: which word?"


async def test_mail_right_after_the_reply_appears_mails_that_reply_not_a_command_answer(
    make_gateway: Callable[..., Gateway],
) -> None:
    """The reply is on screen before its task completes (the progress display is closed
    after it): /mail typed at that moment mails it. CI once saw "Nothing to mail yet"."""
    gw = make_gateway()
    await gw.start()
    closing = gw.chat.hang("done")  # the closing progress update
    asked = await gw.chat_says("remember heron")
    await gw.until(lambda: gw.chat.texts("dm", "reply"), "the reply on screen")
    assert (await gw.task("matrix", asked)).state.value != "completed"

    answer = await gw.answer("/mail")
    assert answer.startswith(f"Mailed the latest reply to {ALICE_MAIL}"), answer
    assert "Echo: remember heron" in gw.mail.requests[-1].text
    closing.release()
    await gw.done("matrix", asked)

    await gw.answer("/status")
    await gw.answer("/mail")
    assert "Echo: remember heron" in gw.mail.requests[-1].text, "not the /status answer"


async def test_mail_says_why_it_cannot_work(make_gateway: Callable[..., Gateway]) -> None:
    gw = make_gateway()
    await gw.start()
    assert (await gw.answer("/mail")).startswith("Nothing to mail yet")
    await _conversation_with_a_reply(gw)
    unmapped = await gw.answer("/mail", sender="bob")
    assert "bob has none in the owner's identity map (access.identities)" in unmapped
    gw.mail.fail("mail", times=1, error=lambda: OSError("connection refused"))
    failed = await gw.answer("/mail")
    assert failed.startswith(f"The mail to {ALICE_MAIL} could not be sent (OSError")
    assert gw.mail.requests == []

    no_mail = make_gateway(mail=False)
    await no_mail.start()
    await _conversation_with_a_reply(no_mail)
    assert (await no_mail.answer("/mail")).startswith("No channel here can send mail")


async def test_claims_that_do_not_hold_never_join_the_chat_conversation(
    make_gateway: Callable[..., Gateway],
) -> None:
    gw = make_gateway()
    await gw.start()
    conversation = await _conversation_with_a_reply(gw)

    # A chat message claiming the conversation (only a mail channel may), an unmapped
    # address, a mapped person with no Matrix id: each is an unknown sender where it wrote,
    # whose message waits for an owner's card, and none joins the conversation.
    claims = [
        (gw.chat, "alice", "other"),
        (gw.mail, "eve@example.test", "dm"),
        (gw.mail, "mo@example.test", "dm"),
    ]
    for channel, sender, room in claims:
        held = await gw.hear(
            channel, sender, text=f"hello from {sender}", room=room, continues=conversation
        )
        await gw.until(
            lambda s=sender: any(f"({s})" in t for t in gw.chat.texts("owners", "card")),  # type: ignore[misc]
            f"a card for {sender}",
        )
        assert (await gw.task(channel.name, held)).conversation_id is None
    assert [m.body for m in gw.agent.runs] == ["remember heron"]


async def test_a_restart_between_the_mail_reply_and_its_copy_in_chat_copies_it_once(
    make_gateway: Callable[..., Gateway],
) -> None:
    gw = make_gateway()
    await gw.start()
    conversation = await _conversation_with_a_reply(gw)
    hang = gw.chat.hang("reply", room="dm")
    asked = await gw.hear(gw.mail, ALICE_MAIL, text="go on", continues=conversation)
    await gw.until(lambda: hang.hits, "the copy in chat to start")
    assert gw.mail.texts("dm", "reply") == ["Echo: go on"]
    await gw.stop()  # the daemon dies while the copy is on its way
    gw.chat.mend()
    await gw.start()

    await gw.done("email", asked)
    copies = [t for t in gw.chat.texts("dm", "reply") if "Continued by mail" in t]
    assert len(copies) == 1
    assert gw.mail.texts("dm", "reply") == ["Echo: go on"], "the mail is not sent again"


def test_identities_refuse_typos_and_one_id_for_two_people() -> None:
    with pytest.raises(ValidationError, match="e-mail"):
        AccessSettings.model_validate({"identities": [{"matrix": "@a:hs", "e-mail": "a@x.org"}]})
    with pytest.raises(ValidationError, match="the same email id is in more than one identity"):
        AccessSettings.model_validate(
            {"identities": [{"matrix": "@a:hs", "email": "A@x.org"}, {"email": "a@X.org"}]}
        )
    with pytest.raises(ValidationError, match="not an email address"):
        AccessSettings.model_validate({"identities": [{"email": "alice at x.org"}]})
    access = AccessSettings.model_validate({"identities": [{"slack": "U1", "email": "A@X.org"}]})
    found = access.identity_of("email", "a@x.org")
    assert found is not None
    assert found.on("slack") == "U1"
    assert access.identity_of("slack", "U2") is None
