"""Approval cards as a stranger would shape them, against real Synapse: a display name, a
room name and a held message are the stranger's words, and the owner's card must show them
as text, not as a link the owner could press or as bidi-reversed text that makes the id
beside the name read as someone else's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fake_anthropic import FakeAnthropic
from tests.synapse_fixtures import SynapseServer, bot_text, matrix_config, membership

RLO = "\u202e"
"""RIGHT-TO-LEFT OVERRIDE: everything after it on the line is shown reversed."""


def _shown(event: dict[str, Any]) -> str:
    content = event.get("content") or {}
    return f"{content.get('body', '')}\n{content.get('formatted_body', '')}"


async def test_a_strangers_name_room_name_and_message_cannot_link_or_reverse_the_card(
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

    await eve.create_room([bot.user_id], name=f"<https://evil.test/join> {RLO}ksed renwO")
    invite = await alice.wait_for(desk, bot_text(bot.user_id, r"Invitation to"))
    assert "href" not in str(invite["content"].get("formatted_body", "")), invite["content"]
    assert RLO not in _shown(invite)
