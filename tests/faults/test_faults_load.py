"""Load on the chat channels: 20 conversations sending at once, each a message a second for
``GATEWAY_BOT_LOAD_SECONDS`` (2 in CI; longer by hand): no reply lost, none doubled, and
each conversation's replies in the order its messages were sent.

What is under test is the daemon (intake, the per-conversation scheduler, the channel's
sends), not the model: the agent is ``tests/support/fast_agent.py``'s script, on the host sandbox.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write_config
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import APP_TOKEN, BOT_TOKEN, TEAM, FakeSlack
from tests.support.fast_agent import fast_agent_sections
from tests.support.synapse_fixtures import SynapseServer, bot_text, matrix_config, membership

pytestmark = pytest.mark.slow

CONVERSATIONS = 20
SECONDS = int(os.environ.get("GATEWAY_BOT_LOAD_SECONDS", "2"))
ECHO = re.compile(r"Echo: LOAD-(\d+)-(\d+)")


def load_sections(tmp_path: Path) -> dict[str, Any]:
    return fast_agent_sections(tmp_path, max_concurrent_tasks=4, max_pending_per_conversation=1000)


def check_answers(answers: dict[int, list[int]], sent: dict[int, int]) -> None:
    """``answers``: per conversation, the sequence numbers its replies echo, in the order
    they appeared. Each sent message is answered once, in the order sent."""
    for conversation, count in sent.items():
        got = answers.get(conversation, [])
        assert got == list(range(count)), f"conversation {conversation}: replies {got}"


def wait_until(check: Any, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.3)


# ----- Matrix -------------------------------------------------------------------------


async def test_matrix_twenty_rooms_at_once_each_answered_once_in_order(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    alice = await meet("alice")
    bot = await synapse.register("bot")
    rooms = [await alice.create_room([bot.user_id]) for _ in range(CONVERSATIONS)]
    config = matrix_config(
        tmp_path, target_repo, fake_api, synapse, bot, [alice.user_id],
        sections=load_sections(tmp_path),
    )  # fmt: skip
    daemon = gateway("run", "--config", str(config))
    for room in rooms:
        await alice.wait_for(room, membership(bot.user_id, "join"))

    sent: dict[int, int] = dict.fromkeys(range(CONVERSATIONS), 0)

    async def talk(number: int) -> None:
        for second in range(SECONDS):
            await alice.say(rooms[number], f"LOAD-{number}-{second} go")
            sent[number] += 1
            await asyncio.sleep(1)

    await asyncio.gather(*(talk(number) for number in range(CONVERSATIONS)))
    last = SECONDS - 1
    for number, room in enumerate(rooms):
        await alice.wait_for(room, bot_text(bot.user_id, rf"Echo: LOAD-{number}-{last}\b"), 180)

    answers: dict[int, list[int]] = {}
    for number, room in enumerate(rooms):
        for event in await alice.history(room):
            body = str((event.get("content") or {}).get("body", ""))
            if bot_text(bot.user_id, ECHO.pattern)(event) and (found := ECHO.search(body)):
                assert int(found[1]) == number, body
                answers.setdefault(number, []).append(int(found[2]))
    check_answers(answers, sent)
    assert daemon.process.poll() is None, daemon.stderr


# ----- Slack --------------------------------------------------------------------------


def test_slack_twenty_threads_at_once_each_answered_once_in_order(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    """Twenty people, each in a direct message with the bot: the first message opens a
    thread (a conversation), the next ones go into it."""
    users = [f"U0LOAD{number:02d}" for number in range(CONVERSATIONS)]
    dms = [f"D0LOAD{number:02d}" for number in range(CONVERSATIONS)]
    for user, dm in zip(users, dms, strict=True):
        fake_slack.add_user(user, user.lower())
        fake_slack.add_channel(dm, im_with=user)
    settings = {
        "bot_token": BOT_TOKEN,
        "app_token": APP_TOKEN,
        "team_ids": [TEAM],
        "allowed_users": users,
        "api_base_url": fake_slack.base_url,
        "reconnect_max_delay_seconds": 1.0,
    }
    config = write_config(
        tmp_path, target_repo, fake_api, channels={"console": None, "slack": settings},
        **load_sections(tmp_path),
    )  # fmt: skip
    daemon = gateway("run", "--config", str(config))
    fake_slack.wait_connected()

    roots: dict[int, str] = {}
    sent: dict[int, int] = dict.fromkeys(range(CONVERSATIONS), 0)
    for second in range(SECONDS):
        started = time.monotonic()
        for number, (user, dm) in enumerate(zip(users, dms, strict=True)):
            text = f"LOAD-{number}-{second} go"
            ts = fake_slack.user_says(user, dm, text, thread_ts=roots.get(number))
            roots.setdefault(number, ts)
            sent[number] += 1
        time.sleep(max(0.0, 1 - (time.monotonic() - started)))

    def replies(number: int) -> list[int]:
        texts = fake_slack.texts(dms[number], roots[number])
        return [int(found[2]) for text in texts if (found := ECHO.search(text))]

    wait_until(
        lambda: all(len(replies(n)) >= sent[n] for n in range(CONVERSATIONS)),
        "every thread's replies",
    )
    check_answers({n: replies(n) for n in range(CONVERSATIONS)}, sent)
    assert daemon.process.poll() is None, daemon.stderr
