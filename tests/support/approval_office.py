"""The office the approval tests happen in: an owner, a stranger and a third user on a real
Synapse, the owner's desk (where cards go) and a team room, the real daemon in both."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_anthropic import FakeAnthropic
from tests.support.synapse_fixtures import (
    Human,
    SynapseServer,
    bot_text,
    matrix_config,
    membership,
    relation_of,
)


def reaction(event_id: str, key: str) -> dict[str, object]:
    return {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}


def localpart(user_id: str) -> str:
    return user_id[1:].split(":")[0]


@dataclass
class Office:
    alice: Human
    mallory: Human
    eve: Human
    bot: str
    desk: str
    team: str
    config: Path
    daemon: Any


async def card_ready(owner: Human, desk: str, bot: str, pattern: str) -> dict[str, Any]:
    """The card, once the bot's own ✅ and ❌ are on it (so a tap has something to press)."""
    card = await owner.wait_for(desk, bot_text(bot, pattern))
    for key in ("✅", "❌"):
        await owner.wait_for(
            desk,
            lambda e, key=key: (
                e.get("type") == "m.reaction"
                and e.get("sender") == bot
                and relation_of(e).get("event_id") == card["event_id"]
                and relation_of(e).get("key") == key
            ),
        )
    return card


@pytest.fixture
def office(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> Callable[..., Awaitable[Office]]:
    """alice owns the bot; mallory is in the team room but not allowed; eve is a third user
    who can see the owner's desk. The daemon is running and in both rooms."""

    async def open_office(rooms: list[dict[str, Any]] | None = None) -> Office:
        alice, mallory, eve = await meet("alice"), await meet("mallory"), await meet("eve")
        account = await synapse.register("bot")
        bot = account.user_id
        desk = await alice.create_room([bot, eve.user_id], name="Owner desk")
        await eve.join(desk)
        team = await alice.create_room([bot, mallory.user_id], name="Team")
        await mallory.join(team)
        access: dict[str, Any] = {
            "owners": {"matrix": [alice.user_id]},
            "approval_destination": {"channel": "matrix", "context": {"room_id": desk}},
            "rooms": [{**room, "match": room.get("match", team)} for room in rooms or []],
        }
        config = matrix_config(
            tmp_path,
            target_repo,
            fake_api,
            synapse,
            account,
            [alice.user_id, eve.user_id],
            sections={"access": access},
        )
        daemon = gateway("run", "--config", str(config))
        await alice.wait_for(team, membership(bot, "join"))
        await alice.wait_for(desk, membership(bot, "join"))
        return Office(alice, mallory, eve, bot, desk, team, config, daemon)

    return open_office
