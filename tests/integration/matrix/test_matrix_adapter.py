"""The Matrix adapter against a real Synapse, driven in-process the way the core drives it:
cards and the reactions that press their buttons, and replies that stay exactly-once and
readable when the daemon re-sends them after a crash or they outgrow one event."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway_bot.channels.matrix import MatrixAdapter
from gateway_bot.channels.matrix.events import CARD_KEY
from gateway_bot.config.channels import MatrixChannelSettings
from gateway_bot.core.channel import AuthenticationError
from gateway_bot.domain.messages import (
    Button,
    Card,
    Decision,
    InboundMessage,
    RawMessage,
    Reply,
    Usage,
)
from gateway_bot.state.database import Database
from tests.support.synapse_fixtures import (
    Event,
    Human,
    MatrixAccount,
    SynapseServer,
    bot_edit,
    bot_text,
    content_of,
    membership,
    relation_of,
)

pytestmark = pytest.mark.slow

APPROVAL = Card(
    title="Allow Mallory in Project room?",
    body="They wrote: **run the tests**",
    buttons=(Button("Allow", "approval:K7:allow", "✅"), Button("Deny", "approval:K7:deny", "❌")),
)


class RunningAdapter:
    """An adapter with its listener started; what it hears is kept in ``heard``."""

    def __init__(
        self, settings: MatrixChannelSettings, state_dir: Path, database: Database
    ) -> None:
        self.adapter = MatrixAdapter(settings, state_dir, database)
        self.heard: asyncio.Queue[RawMessage] = asyncio.Queue()

    async def start(self) -> MatrixAdapter:
        async def submit(raw: RawMessage) -> bool:
            await self.heard.put(raw)
            return True

        await self.adapter.listener.start(submit)
        return self.adapter

    async def next_heard(self) -> RawMessage:
        return await asyncio.wait_for(self.heard.get(), 60)


@pytest.fixture
async def bot_and_alice(meet, synapse: SynapseServer) -> tuple[MatrixAccount, Human, str]:
    alice = await meet("alice")
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id], name="Approvals")
    return bot, alice, room


@pytest.fixture
async def run_adapter(
    state_database: Database,
) -> AsyncIterator[Callable[[MatrixChannelSettings, Path], RunningAdapter]]:
    """Start adapters like the daemon does; their listeners are stopped after the test. They
    share one state database, as a restarted daemon finds its state.db again."""
    started: list[RunningAdapter] = []

    def make(settings: MatrixChannelSettings, state_dir: Path) -> RunningAdapter:
        running = RunningAdapter(settings, state_dir, state_database)
        started.append(running)
        return running

    yield make
    for running in started:
        await running.adapter.listener.stop()


def _settings(synapse: SynapseServer, bot: MatrixAccount, alice: Human) -> MatrixChannelSettings:
    return MatrixChannelSettings(
        homeserver=synapse.base_url,
        user_id=bot.user_id,
        password=bot.password,
        allowed_users=[alice.user_id],
        max_message_bytes=2000,
    )


def _reaction(event_id: str, key: str) -> dict[str, object]:
    return {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}


def _is_reaction(sender: str, target: str, key: str) -> object:
    return lambda e: (
        e.get("sender") == sender
        and e.get("type") == "m.reaction"
        and relation_of(e).get("event_id") == target
        and relation_of(e).get("key") == key
    )


async def test_a_reaction_on_a_card_is_a_decision_even_after_a_restart(
    synapse: SynapseServer,
    bot_and_alice: tuple[MatrixAccount, Human, str],
    run_adapter: Callable[[MatrixChannelSettings, Path], RunningAdapter],
    tmp_path: Path,
) -> None:
    bot, alice, room = bot_and_alice
    settings = _settings(synapse, bot, alice)
    first = run_adapter(settings, tmp_path)
    adapter = await first.start()
    await alice.wait_for(room, membership(bot.user_id, "join"))

    card_ref = await adapter.send_card({"room_id": room}, APPROVAL)
    card = await alice.wait_for(room, lambda e: e.get("event_id") == card_ref)
    assert "Allow Mallory in Project room?" in card["content"]["body"]
    assert "<strong>run the tests</strong>" in card["content"]["formatted_body"]
    assert [b["emoji"] for b in card["content"][CARD_KEY]["buttons"]] == ["✅", "❌"]
    for key in ("✅", "❌"):
        await alice.wait_for(room, _is_reaction(bot.user_id, card_ref, key))  # type: ignore[arg-type]

    pressed = await alice.send(room, "m.reaction", _reaction(card_ref, "✅"))
    raw = await first.next_heard()
    assert raw.message_id == pressed
    decision = await adapter.authenticate_and_parse(raw)
    assert isinstance(decision, Decision)
    assert (decision.channel, decision.action_id, decision.decider_id) == (
        "matrix",
        "approval:K7:allow",
        alice.user_id,
    )
    await adapter.listener.stop()

    # A new process knows nothing in memory: the buttons are read from the card event.
    second = run_adapter(settings, tmp_path)
    restarted = await second.start()
    assert await restarted.authenticate_and_parse(raw) == decision

    decided = Card("Allowed by Alice", "Mallory may now use the bot here.", ())
    await restarted.update_card({"room_id": room}, card_ref, decided)
    await alice.wait_for(room, bot_edit(bot.user_id, card_ref, r"^Allowed by Alice"))

    # Once decided, the card's buttons are gone: a late reaction presses nothing.
    late = await alice.send(room, "m.reaction", _reaction(card_ref, "❌"))
    said = await alice.say(room, "a message after the late reaction")
    assert (await second.next_heard()).message_id == said
    late_event = dict(raw.payload["event"], event_id=late, content=_reaction(card_ref, "❌"))
    late_raw = RawMessage(
        "matrix", late, alice.user_id, {"kind": "event", "room_id": room, "event": late_event}, 0.0
    )
    with pytest.raises(AuthenticationError):
        await restarted.authenticate_and_parse(late_raw)


def _bot_parts(history: list[Event], bot: str) -> list[Event]:
    return [e for e in history if bot_text(bot, r"")(e) and e["content"]["msgtype"] == "m.text"]


async def test_a_re_sent_reply_is_posted_once_and_long_replies_are_split(
    synapse: SynapseServer,
    bot_and_alice: tuple[MatrixAccount, Human, str],
    run_adapter: Callable[[MatrixChannelSettings, Path], RunningAdapter],
    tmp_path: Path,
) -> None:
    bot, alice, room = bot_and_alice
    settings = _settings(synapse, bot, alice)
    first = run_adapter(settings, tmp_path)
    adapter = await first.start()
    await alice.wait_for(room, membership(bot.user_id, "join"))
    asked = await alice.say(room, "write me a long answer")
    context = {"room_id": room, "thread_root": None, "event_id": asked}

    code = "\n".join(f"line_{n} = {n}  # keep" for n in range(120))
    text = "Here is the code:\n\n```python\n" + code + "\n```\n\nThat is **all**."
    reply = Reply(text=text, usage=Usage(cost_usd=0.0123, num_turns=2, duration_s=3.4))
    await adapter.send_reply(context, "task-long", reply)
    await adapter.listener.stop()

    # The daemon died before recording the delivery; the next start sends it again.
    second = run_adapter(settings, tmp_path)
    restarted = await second.start()
    await restarted.send_reply(context, "task-long", reply)
    await alice.say(room, "MARKER after the re-send")
    await alice.wait_for(room, lambda e: content_of(e).get("body") == "MARKER after the re-send")
    await restarted.listener.stop()

    parts = _bot_parts(await alice.history(room), bot.user_id)
    assert len(parts) > 1, "a reply over max_message_bytes is split"
    assert len({p["event_id"] for p in parts}) == len(parts)
    bodies = [p["content"]["body"] for p in parts]
    assert len(bodies) == len(set(bodies)), "each part is posted once"
    for part in parts:
        formatted = part["content"]["formatted_body"]
        assert formatted.count("<pre>") == formatted.count("</pre>")
        assert len(part["content"]["body"].encode()) <= 2000
    joined = "\n".join(bodies)
    assert all(f"line_{n} = {n}" in joined for n in range(120))
    assert '<code class="language-python">' in parts[1]["content"]["formatted_body"]
    assert bodies[-1].endswith("$0.0123 · 2 turns · 3.4 s")
    assert relation_of(parts[0])["m.in_reply_to"]["event_id"] == asked


async def test_membership_from_the_sync_refuses_departed_members_and_strangers(
    synapse: SynapseServer,
    meet: Callable[..., Any],
    run_adapter: Callable[[MatrixChannelSettings, Path], RunningAdapter],
    tmp_path: Path,
) -> None:
    """The attack on authentication without a homeserver round trip (decision 0105): the bot's
    own sync says who is joined, and a member's message routed after they left, or a
    message claiming a sender who never joined, is refused; in one batch, a member who
    spoke and then left is refused, one who joined and then spoke is accepted."""
    alice, leon, mallory, carol = [await meet(n) for n in ("alice", "leon", "mallory", "carol")]
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id, leon.user_id, mallory.user_id], name="Team")
    running = run_adapter(_settings(synapse, bot, alice), tmp_path)
    adapter = await running.start()
    await alice.wait_for(room, membership(bot.user_id, "join"))

    await leon.join(room)  # after the bot's first sync: the join reaches it as a delta
    first = await leon.say(room, "LEON-1")
    leon_first = await running.next_heard()
    assert leon_first.message_id == first
    synced = adapter.listener.members.joined(room)
    assert synced is not None
    assert leon.user_id in synced
    parsed = await adapter.authenticate_and_parse(leon_first)
    assert isinstance(parsed, InboundMessage)
    assert parsed.sender_id == leon.user_id

    # With the bot not syncing, these come back in one batch when it syncs again.
    await adapter.listener.stop()
    second = await leon.say(room, "LEON-2")
    await leon.leave(room)
    await mallory.join(room)
    third = await mallory.say(room, "MALLORY-1")
    await running.start()
    leon_second, mallory_first = await running.next_heard(), await running.next_heard()
    assert (leon_second.message_id, mallory_first.message_id) == (second, third)
    synced = adapter.listener.members.joined(room)
    assert synced is not None
    assert leon.user_id not in synced

    for departed in (leon_second, leon_first):
        with pytest.raises(AuthenticationError, match="not a joined member"):
            await adapter.authenticate_and_parse(departed)
    joined_late = await adapter.authenticate_and_parse(mallory_first)
    assert isinstance(joined_late, InboundMessage)
    assert joined_late.sender_id == mallory.user_id

    event = dict(leon_first.payload["event"], sender=carol.user_id)
    stranger = RawMessage(
        "matrix", "$forged", carol.user_id, {"kind": "event", "room_id": room, "event": event}, 0.0
    )
    with pytest.raises(AuthenticationError, match="not a joined member"):
        await adapter.authenticate_and_parse(stranger)
