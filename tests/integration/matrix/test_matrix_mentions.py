"""Attacks on Matrix notifications: the bot's messages carry the agent's text and what people
typed, so they must never ping a member by name or the whole room (``@room``), and never
make a client fetch an image from outside the homeserver (a tracking pixel).

Every message the bot sends has an empty ``m.mentions``: the homeserver's push rules then
notify only whom it names (nobody) and skip the legacy rules that match a display name or
``@room`` in the body. Images stay only from ``mxc://``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway_bot.channels.matrix.render import (
    card_content,
    edit_of,
    markdown_to_html,
    reply_contents,
    without_mentions,
)
from gateway_bot.domain.messages import Button, Card, Reply
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.synapse_fixtures import (
    Event,
    Human,
    SynapseServer,
    bot_text,
    matrix_config,
    membership,
    relation_of,
)

pytestmark = pytest.mark.slow

PIXEL = "https://tracker.example/pixel.png"


# -- the renderer ------------------------------------------------------------------------


def test_only_homeserver_images_are_shown() -> None:
    assert markdown_to_html("![logo](mxc://hs.example/abc)") == (
        '<p><img src="mxc://hs.example/abc" alt="logo"></p>'
    )
    outside = markdown_to_html(f"![pixel]({PIXEL})")
    assert "<img" not in outside
    assert outside == f'<p><a href="{PIXEL}">pixel</a></p>'


def test_every_content_mentions_nobody_edits_included() -> None:
    reply = reply_contents(Reply(text="hi @room, [bob](https://matrix.to/#/@bob:hs)"), 60_000)
    card = card_content(Card("t", "@room", (Button("Allow", "a", emoji="✅"),)), "key")
    assert [c["m.mentions"] for c in [*reply, card]] == [{}, {}]
    edit = without_mentions(edit_of("$ack", {"msgtype": "m.text", "body": "@room"}))
    assert edit["m.mentions"] == {}
    assert edit["m.new_content"]["m.mentions"] == {}
    file_event = without_mentions({"msgtype": "m.file", "body": "@room.txt"})
    assert file_event["m.mentions"] == {}


# -- the real daemon on a real Synapse ---------------------------------------------------


async def notifications(synapse: SynapseServer, person: Human) -> list[dict[str, Any]]:
    """What the homeserver's push rules decided for ``person``: the notification list a
    client shows (``highlight`` is the ping: a sound, a badge, a mention)."""
    url = f"{synapse.base_url}/_matrix/client/v3/notifications"
    headers = {"Authorization": f"Bearer {person.account.access_token}"}
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as answer:
        body = await answer.json()
    assert answer.status == 200, body
    return list(body["notifications"])


def pings(notification: dict[str, Any]) -> bool:
    return any(
        isinstance(action, dict)
        and action.get("set_tweak") == "highlight"
        and action.get("value", True)
        for action in notification.get("actions", [])
    )


async def test_an_agent_reply_pings_nobody_and_loads_no_outside_image(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice, bob = await meet("alice"), await meet("bob")
    await bob.client.set_displayname("Bobby")
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id, bob.user_id], name="Team room")
    await bob.join(room)
    levels = await alice.client.room_get_state_event(room, "m.room.power_levels")
    power = dict(levels.content)
    power["users"] = {**power.get("users", {}), bot.user_id: 50}  # may notify the room
    await alice.client.room_put_state(room, "m.room.power_levels", power)
    control = await alice.say(room, "Bobby, @room: before the bot arrives")
    config = matrix_config(tmp_path, target_repo, fake_api, synapse, bot, [alice.user_id])
    gateway("run", "--config", str(config))
    await alice.wait_for(room, membership(bot.user_id, "join"))

    await alice.say(room, f"greet Bobby and @room ![pixel]({PIXEL})", mention=bot.user_id)

    reply = await alice.wait_for(room, bot_text(bot.user_id, r"Echo: greet Bobby and @room"))
    formatted = reply["content"]["formatted_body"]
    assert "<img" not in formatted, formatted
    assert f'href="{PIXEL}"' in formatted
    await alice.wait_for(room, lambda e: "Done" in str(_shown(e).get("body", "")))
    bots: list[Event] = [
        e
        for e in await alice.history(room)
        if e.get("sender") == bot.user_id and e.get("type") == "m.room.message"
    ]
    assert len(bots) >= 3, "acknowledgement, its edits, the reply"
    assert all(_shown(e).get("m.mentions") == {} for e in bots), bots
    assert all(e["content"].get("m.mentions") == {} for e in bots), bots

    seen = await notifications(synapse, bob)
    assert any(n["event"]["event_id"] == control and pings(n) for n in seen), (
        "a person's message naming Bobby and @room pings him (the rules are on)"
    )
    pinged = [
        n["event"]["content"].get("body")
        for n in seen
        if n["event"]["sender"] == bot.user_id and pings(n)
    ]
    assert not pinged, f"the bot pinged Bobby: {pinged}"


def _shown(event: Event) -> dict[str, Any]:
    """The content a client shows: an edit's new content, else the event's own."""
    content = event.get("content") or {}
    if relation_of(event).get("rel_type") == "m.replace":
        return dict(content.get("m.new_content") or {})
    return dict(content)
