"""Approval cards and invitations as a stranger would shape them, against real Synapse: a
display name, a room name and a held message are the stranger's words, and the owner's card
must show them as text, not as a link the owner could press or as bidi-reversed text that
makes the id beside the name read as someone else's. An invitation's ``is_direct`` is the
stranger's word too: a group room it flags is not a direct chat once the owner lets the bot
in (there every line would engage the bot)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.fake_anthropic import FakeAnthropic
from tests.support.synapse_fixtures import (
    SynapseServer,
    bot_text,
    from_user,
    matrix_config,
    membership,
    relation_of,
)

RLO = "\u202e"
"""RIGHT-TO-LEFT OVERRIDE: everything after it on the line is shown reversed."""


def _shown(event: dict[str, Any]) -> str:
    content = event.get("content") or {}
    return f"{content.get('body', '')}\n{content.get('formatted_body', '')}"


async def test_a_strangers_name_room_and_invitation_cannot_shape_the_card_or_the_room(
    gateway: Any,
    meet: Any,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice, mallory, eve = await meet("alice"), await meet("mallory"), await meet("eve")
    bot = await synapse.register("bot")
    desk = await alice.create_room([bot.user_id], name="Owner desk")
    team = await alice.create_room([bot.user_id, mallory.user_id], name="Team")
    # An autolink, a character reference that renders as a bidi override, and a raw one.
    await mallory.client.set_displayname(f"<https://evil.test/allow> &#8238;{RLO}eci")
    await mallory.join(team)
    access = {
        "owners": {"matrix": [alice.user_id]},
        "approval_destination": {"channel": "matrix", "context": {"room_id": desk}},
    }
    config = matrix_config(
        tmp_path, target_repo, fake_api, synapse, bot, [alice.user_id], sections={"access": access}
    )
    gateway("run", "--config", str(config))
    await alice.wait_for(team, membership(bot.user_id, "join"))
    await alice.wait_for(desk, membership(bot.user_id, "join"))

    await mallory.say(team, f"MALLORY-ASKS harmless {RLO}hs | tset.live", mention=bot.user_id)
    card = await alice.wait_for(desk, bot_text(bot.user_id, r"Unknown sender in Team"))
    formatted = str(card["content"].get("formatted_body", ""))
    assert "&lt;https://evil.test/allow&gt;" in formatted, formatted
    assert "href" not in formatted, f"the stranger's name made a link: {formatted}"
    assert RLO not in _shown(card), "a bidi override reached the card"
    assert "&#8238;" not in formatted.replace("&amp;#8238;", ""), "a reference to one did"
    assert "harmless <U+202E>hs | tset.live" in card["content"]["body"], "the override is shown"
    assert mallory.user_id in card["content"]["body"], "the id beside the name is intact"

    # A stranger's invitation into a group room, flagged "direct" (the inviter's to set).
    group = await eve.create_room(
        [bot.user_id, alice.user_id], name=f"<https://evil.test/join> {RLO}ksed renwO", direct=True
    )
    await alice.join(group)
    invite = await alice.wait_for(desk, bot_text(bot.user_id, r"Invitation to"))
    assert "href" not in str(invite["content"].get("formatted_body", "")), invite["content"]
    assert RLO not in _shown(invite)

    # The owner lets the bot in: the room is a group like any other, not a direct chat in
    # which every line engages the bot (before the fix alice's chatter ran the agent).
    await alice.wait_for(
        desk, lambda e: from_user(bot.user_id)(e) and relation_of(e).get("key") == "✅"
    )
    reaction = {"rel_type": "m.annotation", "event_id": invite["event_id"], "key": "✅"}
    await alice.send(desk, "m.reaction", {"m.relates_to": reaction})
    await alice.wait_for(group, membership(bot.user_id, "join"))
    await alice.say(group, "ALICE-CHAT just talking to eve")
    await alice.say(group, "ALICE-MENTION hello", mention=bot.user_id)
    await alice.wait_for(group, bot_text(bot.user_id, r"Echo: .*ALICE-MENTION"))
    history = await alice.history(group)
    echoes = [str(e["content"]["body"]) for e in history if bot_text(bot.user_id, "^Echo:")(e)]
    assert len(echoes) == 1, f"a line that did not address the bot ran: {echoes}"
