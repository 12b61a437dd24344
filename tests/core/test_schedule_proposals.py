"""The agent's schedule requests in a conversation whose channel has no buttons: the card
is a notice naming the codes, only the asker or an owner can decide by command, a second
decision changes nothing, Allow checks again (a time passed meanwhile is refused), and an
unusable request gets a note and no card. (Buttons, reactions and the real request file:
tests/integration/schedules/test_schedules_channels.py and
tests/integration/schedules/test_schedule_proposals_console.py.)"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway_bot.core.commands.effects import not_yours
from gateway_bot.core.schedules.request_file import BadRequest, ScheduleAsk
from gateway_bot.state.database import StateTarget
from tests.core.fakes import BareChannel
from tests.core.test_schedules import ScheduleWorld


@pytest.fixture
async def bare(tmp_path: Path, state_target: StateTarget) -> AsyncIterator[ScheduleWorld]:
    """On both engines."""
    made = ScheduleWorld(tmp_path, channel=BareChannel(), state=state_target)
    await made.start()
    yield made
    await made.close()


async def _card_code(world: ScheduleWorld) -> str:
    notice = await world.until(
        lambda: next(
            (t for t in world.channel.texts("dm") if "The agent asks to schedule a run" in t), None
        ),
        "the schedule request notice",
    )
    assert "Reply `!approve" in notice
    return re.findall(r"!approve ([0-9a-f]{12})", notice)[0]


async def test_only_the_asker_or_an_owner_decides_and_only_once(bare: ScheduleWorld) -> None:
    bare.agent.schedule_requests.append(ScheduleAsk("every day at 18:30", "nightly report", None))
    await bare.reply(await bare.say("propose a nightly report"))
    code = await _card_code(bare)

    refused = await bare.command(f"!approve {code}", sender="bob")
    assert refused == not_yours(code)
    assert (await bare.command("/schedules")).startswith("No schedules")

    allowed = await bare.command(f"!approve {code}")
    assert allowed.startswith('Scheduled #1: "30 18 * * *" (At 18:30 every day, UTC): nightly')
    assert await bare.command(f"!deny {code}") == f"Schedule request {code} was already allowed."
    assert await bare.command(f"!approve {code}", sender="owner") == (
        f"Schedule request {code} was already allowed."
    )
    assert (await bare.command("/schedules")).count("\n#") == 1


async def test_an_owner_may_deny_and_allow_rechecks_the_time(bare: ScheduleWorld) -> None:
    bare.agent.schedule_requests += [
        ScheduleAsk("in 2 hours", "later", None),
        ScheduleAsk("in 1 hours", "soon", "Europe/Berlin"),
    ]
    await bare.reply(await bare.say("propose one"))
    first = await _card_code(bare)
    denied = await bare.command(f"!deny {first}", sender="owner")
    assert denied == f"Denied the agent's schedule request {first}: nothing was scheduled."

    await bare.reply(await bare.say("propose two"))
    second = await bare.until(
        lambda: [
            c
            for c in re.findall(r"!approve ([0-9a-f]{12})", " ".join(bare.channel.texts("dm")))
            if c != first
        ],
        "the second card",
    )
    await bare.advance_to("2026-11-24 12:00")  # past "in 1 hours" from 10:00
    late = await bare.command(f"!approve {second[0]}")
    assert late == "Not scheduled: once at 2026-11-24 12:00 (Europe/Berlin) is in the past."
    assert (await bare.command("/schedules")).startswith("No schedules")


async def test_an_unusable_request_gets_a_note_and_no_card(bare: ScheduleWorld) -> None:
    bare.agent.schedule_requests += [
        BadRequest("schedule.json is a symbolic link, not a file: ignored"),
        ScheduleAsk("every 1 minutes", "poll", None),
    ]
    await bare.reply(await bare.say("propose a link"))
    await bare.until(
        lambda: (
            "The agent's schedule request was not used: schedule.json is a symbolic link, "
            "not a file: ignored." in bare.channel.texts("dm")
        ),
        "the note",
    )
    await bare.reply(await bare.say("propose polling"))
    await bare.until(
        lambda: any(
            "shortest interval allowed is 5 minutes" in t for t in bare.channel.texts("dm")
        ),
        "the refusal",
    )
    assert not any("asks to schedule" in t for t in bare.channel.texts("dm"))


async def test_a_request_nobody_decided_in_time_expires_instead_of_scheduling(
    bare: ScheduleWorld,
) -> None:
    """A card found days later must not create a schedule its asker has long forgotten:
    past ``access.approval_expiry_hours`` (24) a press only says it expired, for good."""
    bare.agent.schedule_requests.append(ScheduleAsk("every day at 18:30", "nightly", None))
    await bare.reply(await bare.say("propose a nightly report"))
    code = await _card_code(bare)

    await bare.advance_to("2026-11-25 10:01")  # the card came at 10:00 the day before
    expired = await bare.command(f"!approve {code}")
    assert expired == (
        f"Schedule request {code} expired (undecided for 24 h): nothing was scheduled. "
        "Ask the agent again if it is still wanted."
    )
    assert (await bare.command("/schedules")).startswith("No schedules")
    again = await bare.command(f"!approve {code}", sender="owner")
    assert again == f"Schedule request {code} was already expired."
