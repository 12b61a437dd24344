"""A Matrix conversation continued by mail (decision 0077, ``/mail``), against the real daemon, a
real Synapse, Dovecot and an SMTP server: ``!mail`` sends the latest reply to the sender's
mapped address, a reply to that mail runs in the same conversation (same container, same
agent session) and comes back by mail, and the Matrix room sees a note and the reply. Then
the attacks: a forged tag or reply from an unauthenticated sender, an unmapped sender and
another mapped person writing into the thread never reach the conversation."""

from __future__ import annotations

import re
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.email_fixtures import (
    ALICE,
    DOMAIN,
    TRUSTED_ID,
    Dovecot,
    SmtpCatcher,
    email_config,
    mail,
    text_of,
)
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.sandbox_fixtures import SandboxSetup
from tests.support.synapse_fixtures import (
    MatrixAccount,
    SynapseServer,
    bot_text,
    content_of,
    membership,
)

pytestmark = pytest.mark.slow

BOB = f"bob@{DOMAIN}"
CAROL = f"carol@{DOMAIN}"
TAG = re.compile(r"\[ID:([0-9a-f]{8})\]")

_started: list[Any] = []


@pytest.fixture(autouse=True)
def _daemon_logs() -> Iterator[None]:
    _started.clear()
    yield
    for daemon in _started:
        print(f"--- daemon stderr ---\n{daemon.stderr}")


def _config(
    tmp_path: Path,
    repo: Path,
    api: FakeAnthropic,
    dovecot: Dovecot,
    smtp: SmtpCatcher,
    mailbox: str,
    synapse: SynapseServer,
    bot: MatrixAccount,
    allowed: list[str],
    access: dict[str, Any],
    sandbox: SandboxSetup | None = None,
) -> Path:
    """Matrix and email channels; Alice's address is NOT in the email allow list: only the
    identity map lets her mail continue her Matrix conversation."""
    matrix = {
        "homeserver": synapse.base_url,
        "user_id": bot.user_id,
        "password": bot.password,
        "allowed_users": allowed,
    }
    path = email_config(
        tmp_path,
        repo,
        api,
        dovecot,
        smtp,
        mailbox,
        extra_channels={"matrix": matrix},
        access=access,
        allowed_senders=[f"someone-else@{DOMAIN}"],
    )
    if sandbox is None:
        return path
    channels = yaml.safe_load(path.read_text())
    path = sandbox.config()
    config = yaml.safe_load(path.read_text())
    config["channels"], config["access"] = channels["channels"], channels["access"]
    path.write_text(yaml.safe_dump(config))
    return path


def _prompts(api: FakeAnthropic) -> str:
    return " ".join(" ".join(api.user_texts(r)) for r in api.requests)


async def test_mail_from_matrix_then_a_mail_reply_continues_the_same_conversation(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    dovecot: Dovecot,
    smtp_catcher: SmtpCatcher,
    mailbox: str,
    sandbox: SandboxSetup,
) -> None:
    alice = await meet("alice")
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id], name="Project room")
    access = {"identities": [{"name": "Alice", "matrix": alice.user_id, "email": ALICE}]}
    config = _config(
        tmp_path, target_repo, fake_api, dovecot, smtp_catcher, mailbox, synapse, bot,
        [alice.user_id], access, sandbox,
    )  # fmt: skip
    _started.append(gateway("run", "--config", str(config)))
    await alice.wait_for(room, membership(bot.user_id, "join"))

    await alice.say(room, "FIRST-ASK remember the word heron")
    await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*FIRST-ASK"))
    [(conversation, before)] = sandbox.containers().items()

    await alice.say(room, "!mail")
    answer = await alice.wait_for(room, bot_text(bot.user_id, r"Mailed the latest reply"))
    assert ALICE in content_of(answer)["body"]
    [opening] = smtp_catcher.wait_for(ALICE)
    assert TAG.search(str(opening["Subject"])).group(1) == conversation  # type: ignore[union-attr]
    assert not str(opening["Subject"]).startswith("Re:")
    assert "Echo: FIRST-ASK remember the word heron" in text_of(opening)
    assert "Reply to this mail to continue it" in text_of(opening)

    follow_up = mail(
        f"Re: {opening['Subject']}",
        "MAIL-FOLLOWUP which word was it?\n\n> quoted history",
        to=mailbox,
        in_reply_to=str(opening["Message-ID"]),
        references=str(opening["Message-ID"]),
    )
    dovecot.deliver(mailbox, follow_up)

    [by_mail] = smtp_catcher.wait_for(ALICE, where=lambda m: "MAIL-FOLLOWUP" in text_of(m))
    assert "Echo: MAIL-FOLLOWUP which word was it?" in text_of(by_mail)
    assert str(by_mail["In-Reply-To"]) == str(follow_up["Message-ID"])
    assert TAG.search(str(by_mail["Subject"])).group(1) == conversation  # type: ignore[union-attr]
    copy = await alice.wait_for(room, bot_text(bot.user_id, r"Continued by mail"))
    body = content_of(copy)["body"]
    assert body.splitlines()[0] == (
        "✉️ Continued by mail: Alice wrote “MAIL-FOLLOWUP which word was it?”"
    )
    assert "Echo: MAIL-FOLLOWUP which word was it?" in body

    after = sandbox.containers()
    assert list(after) == [conversation], "no second conversation, no second container"
    assert after[conversation]["id"] == before["id"], "the same container ran the mail's task"
    mailed = next(r for r in fake_api.requests if "MAIL-FOLLOWUP" in _prompts_of(fake_api, r))
    assert "FIRST-ASK" in _prompts_of(fake_api, mailed), "the agent session was resumed"
    workspaces = list((tmp_path / "state" / "conversations").iterdir())
    assert [w.name for w in workspaces] == [conversation]


def _prompts_of(api: FakeAnthropic, request: Any) -> str:
    return " ".join(api.user_texts(request))


async def test_forged_and_foreign_mail_into_the_thread_never_continues_the_conversation(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    dovecot: Dovecot,
    smtp_catcher: SmtpCatcher,
    mailbox: str,
) -> None:
    alice, carol = await meet("alice"), await meet("carol")
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id], name="Alice and the bot")
    owners = await alice.create_room([bot.user_id], name="Approvals")
    access = {
        "owners": {"matrix": [alice.user_id]},
        "approval_destination": {"channel": "matrix", "context": {"room_id": owners}},
        "identities": [
            {"matrix": alice.user_id, "email": ALICE},
            {"matrix": carol.user_id, "email": CAROL},
        ],
    }
    config = _config(
        tmp_path, target_repo, fake_api, dovecot, smtp_catcher, mailbox, synapse, bot,
        [alice.user_id, carol.user_id], access,
    )  # fmt: skip
    _started.append(gateway("run", "--config", str(config)))
    await alice.wait_for(room, membership(bot.user_id, "join"))
    await alice.wait_for(owners, membership(bot.user_id, "join"))
    await alice.say(room, "FIRST-ASK hello")
    await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*FIRST-ASK"))
    await alice.say(room, "!mail")
    [opening] = smtp_catcher.wait_for(ALICE)
    subject, opening_id = f"Re: {opening['Subject']}", str(opening["Message-ID"])

    def into_thread(body: str, sender: str, auth: list[str] | None = None) -> EmailMessage:
        return mail(subject, body, sender=sender, to=mailbox, in_reply_to=opening_id, auth=auth)

    # Alice's address, but the MX says DMARC failed: a forger.
    failed = f"{TRUSTED_ID}; dmarc=fail header.from={DOMAIN}"
    dovecot.deliver(mailbox, into_thread("FORGED-ALICE run this", ALICE, [failed]))
    # Only the subject tag, from Alice's address, no authentication at all.
    dovecot.deliver(mailbox, mail(subject, "TAG-ONLY run this", to=mailbox, auth=[]))
    # Bob is authenticated but in no identity: he knows the tag and the Message-ID.
    dovecot.deliver(mailbox, into_thread("BOB-IN what did Alice ask?", BOB))
    # Carol is mapped, but this is Alice's conversation, not hers.
    dovecot.deliver(mailbox, into_thread("CAROL-IN let me continue Alice's", CAROL))
    # Alice herself, authenticated: the one mail that continues the conversation.
    dovecot.deliver(mailbox, into_thread("ALICE-REAL go on", ALICE))

    copy = await alice.wait_for(room, bot_text(bot.user_id, r"Continued by mail: .*ALICE-REAL"))
    assert content_of(copy)["body"].startswith(f"✉️ Continued by mail: {alice.user_id} wrote")
    assert ALICE not in content_of(copy)["body"], "the address stays out of the room"
    bob_card = await alice.wait_for(owners, bot_text(bot.user_id, BOB))
    carol_card = await alice.wait_for(owners, bot_text(bot.user_id, CAROL))
    assert "BOB-IN" in content_of(bob_card)["body"]
    assert "CAROL-IN" in content_of(carol_card)["body"]
    room_text = " ".join(str(content_of(e).get("body")) for e in await alice.history(room))
    prompts = _prompts(fake_api)
    for word in ("FORGED-ALICE", "TAG-ONLY", "BOB-IN", "CAROL-IN"):
        assert word not in room_text, f"{word} reached the Matrix room"
        assert word not in prompts, f"{word} reached the agent"
    assert "ALICE-REAL" in prompts
    assert smtp_catcher.to(BOB) == []
    assert smtp_catcher.to(CAROL) == []
    to_alice = [text_of(m) for m in smtp_catcher.to(ALICE)]
    assert len(to_alice) == 2, "the opening mail and the one answer; forgeries get nothing"


async def test_killed_after_the_smtp_server_accepted_the_mail_it_is_not_mailed_twice(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    dovecot: Dovecot,
    smtp_catcher: SmtpCatcher,
    mailbox: str,
) -> None:
    alice = await meet("alice")
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id], name="Crash room")
    access = {"identities": [{"matrix": alice.user_id, "email": ALICE}]}
    config = _config(
        tmp_path, target_repo, fake_api, dovecot, smtp_catcher, mailbox, synapse, bot,
        [alice.user_id], access,
    )  # fmt: skip
    first = gateway("run", "--config", str(config))
    _started.append(first)
    await alice.wait_for(room, membership(bot.user_id, "join"))
    await alice.say(room, "FIRST-ASK hello")
    await alice.wait_for(room, bot_text(bot.user_id, r"Echo: .*FIRST-ASK"))

    smtp_catcher.hold_after_accept = "] Conversation "  # in the subject: never re-encoded
    await alice.say(room, "!mail")
    assert smtp_catcher.holding.wait(180), "the mail never reached the SMTP server"
    first.kill()  # the server has the mail; the daemon never heard its 250
    smtp_catcher.released.set()
    second = gateway("run", "--config", str(config))
    _started.append(second)

    # Deadlines, not speed: a restart on a loaded machine takes a while.
    await alice.wait_for(room, bot_text(bot.user_id, r"Mailed the latest reply"), within=180)
    [opening] = smtp_catcher.to(ALICE)
    dovecot.deliver(
        mailbox,
        mail(f"Re: {opening['Subject']}", "AFTER-CRASH go on", to=mailbox,
             in_reply_to=str(opening["Message-ID"])),
    )  # fmt: skip
    await alice.wait_for(room, bot_text(bot.user_id, r"Continued by mail: .*AFTER-CRASH"))
    answers = [e for e in await alice.history(room) if bot_text(bot.user_id, "Mailed the")(e)]
    assert len(answers) == 1, "the /mail command is answered once"
    openings = [m for m in smtp_catcher.to(ALICE) if "continue it" in text_of(m)]
    assert len(openings) == 1, "and mailed once"
    assert "is not sent again" in second.stderr
