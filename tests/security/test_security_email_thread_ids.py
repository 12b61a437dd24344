"""A stranger cannot pre-claim one of the bot's own Message-IDs: a mail whose own
Message-ID is in the bot's namespace (``<gwb.{thread}.{ts}@domain>``) was remembered as a
message of the stranger's thread, so the owner's reply to the bot's mail of that id (the
stranger needs the thread's key, in every subject tag, and the send's millisecond) joined
the stranger's thread: the owner's words, and the answer's files, went to the stranger's
conversation."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway_bot.channels.email.adapter import EmailAdapter
from gateway_bot.domain.messages import InboundMessage
from gateway_bot.state.database import Database
from tests.security.test_security_email import BOT, _parsed, _settings
from tests.support.email_fixtures import mail
from tests.support.smtp_catcher import SmtpCatcher


def test_a_strangers_mail_cannot_take_one_of_our_message_ids(
    tmp_path: Path, smtp_catcher: SmtpCatcher
) -> None:
    async def scenario() -> tuple[InboundMessage, InboundMessage, InboundMessage]:
        database = Database()
        await database.open(tmp_path / "state.db")
        try:
            adapter = EmailAdapter(_settings(smtp_catcher, "*@evil.test"), database)
            owner = await _parsed(adapter, mail("plan", "hello", to=BOT).as_bytes())
            ours = f"<gwb.{owner.conversation_key}.1700000000000@example.test>"
            squatter = mail("x", "mine", sender="mallory@evil.test", to=BOT)
            del squatter["Message-ID"]
            squatter["Message-ID"] = ours
            stranger = await _parsed(adapter, squatter.as_bytes())
            reply = await _parsed(
                adapter, mail("Re: plan", "the budget is 40k", to=BOT, in_reply_to=ours).as_bytes()
            )
            return owner, stranger, reply
        finally:
            await database.close()

    owner, stranger, reply = asyncio.run(scenario())

    assert stranger.conversation_key != owner.conversation_key
    assert reply.conversation_key == owner.conversation_key
    assert reply.sender_allowed
