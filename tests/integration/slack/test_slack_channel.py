"""The Slack channel in-process against the fake Slack: connection health as an operator
sees it, who is allowed, what the listener lets through, and files over the limit."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway_bot.channels.slack import SlackAdapter
from gateway_bot.config.channels import SlackChannelSettings
from gateway_bot.core.workspaces.inbox_files import InboxWriter
from gateway_bot.domain.messages import ChannelHealth, InboundMessage, RawMessage
from gateway_bot.state.database import Database
from tests.support.fake_slack import APP_TOKEN, BOT_TOKEN, BOT_USER, TEAM, FakeSlack

MENTION = f"<@{BOT_USER}>"


class Channel:
    """An adapter whose listener submits into a list, as the core's submit would."""

    def __init__(self, fake: FakeSlack, state: Path, database: Database, **settings: Any) -> None:
        self.fake = fake
        self.adapter = SlackAdapter(
            SlackChannelSettings(
                bot_token=BOT_TOKEN,
                app_token=APP_TOKEN,
                team_ids=[TEAM],
                api_base_url=fake.base_url,
                reconnect_max_delay_seconds=0.5,
                **settings,
            ),
            state,
            database,
        )
        self.submitted: list[RawMessage] = []

    async def submit(self, raw: RawMessage) -> bool:
        self.submitted.append(raw)
        return True

    async def until(self, check: Callable[[], object], what: str) -> None:
        deadline = time.monotonic() + 30
        while not check():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.02)

    async def parse(self, raw: RawMessage) -> InboundMessage:
        parsed = await self.adapter.authenticate_and_parse(raw)
        assert isinstance(parsed, InboundMessage)
        return parsed


@pytest.fixture
async def channel(
    fake_slack: FakeSlack, tmp_path: Path, state_database: Database
) -> AsyncIterator[Channel]:
    fake_slack.add_user("U0ALICE", "Alice")
    fake_slack.add_user("U0BOB", "Bob")
    fake_slack.add_channel("C0GENERAL", "general")
    made = Channel(
        fake_slack, tmp_path, state_database, allowed_user_groups=["S0DEVS"], listen="engaging"
    )
    yield made
    await made.adapter.listener.stop()


def health(channel: Channel) -> ChannelHealth:
    return channel.adapter.listener.status.health


async def test_health_degrades_while_slack_is_away_and_recovers(channel: Channel) -> None:
    await channel.adapter.listener.start(channel.submit)
    await channel.until(lambda: health(channel) is ChannelHealth.CONNECTED, "connected")

    channel.fake.connection_error = "internal_error"
    channel.fake.drop_sockets()
    await channel.until(
        lambda: "internal_error" in channel.adapter.listener.status.message,
        "a refused reconnection",
    )
    assert health(channel) is ChannelHealth.DEGRADED
    assert "retrying" in channel.adapter.listener.status.message

    channel.fake.connection_error = None
    await channel.until(lambda: health(channel) is ChannelHealth.CONNECTED, "reconnected")


async def test_a_refused_app_token_fails_for_good(channel: Channel) -> None:
    channel.fake.connection_error = "invalid_auth"
    await channel.adapter.listener.start(channel.submit)
    await channel.until(lambda: health(channel) is ChannelHealth.FAILED, "failed")
    assert "app_token" in channel.adapter.listener.status.message
    opened = channel.fake.connections_opened
    await asyncio.sleep(0.3)
    assert channel.fake.connections_opened == opened, "no retries after a refusal"


async def test_engaging_mode_lets_through_mentions_and_the_bots_threads(channel: Channel) -> None:
    fake = channel.fake
    await channel.adapter.listener.start(channel.submit)
    await asyncio.to_thread(fake.wait_connected)

    chatter = await asyncio.to_thread(fake.user_says, "U0BOB", "C0GENERAL", "lunch?")
    asked = await asyncio.to_thread(fake.user_says, "U0BOB", "C0GENERAL", f"{MENTION} hi")
    await asyncio.to_thread(fake.user_says, "U0BOB", "C0GENERAL", "go on", thread_ts=asked)
    await asyncio.to_thread(fake.user_says, "U0BOB", "C0GENERAL", "aside", thread_ts=chatter)
    await channel.until(lambda: not fake.pending and len(fake.acks) == 5, "every envelope acked")

    bodies = [str(raw.payload["event"]["text"]) for raw in channel.submitted]
    assert bodies == [f"{MENTION} hi", f"{MENTION} hi", "go on"]
    first, _, follow_up = [await channel.parse(raw) for raw in channel.submitted]
    assert first.mentioned
    assert first.body == "hi"
    assert not follow_up.mentioned
    assert follow_up.conversation_key == first.conversation_key
    assert not first.sender_allowed, "Bob is in no allowed group yet"


async def test_members_of_an_allowed_user_group_are_allowed(channel: Channel) -> None:
    fake = channel.fake
    fake.usergroups["S0DEVS"] = ["U0ALICE"]
    await channel.adapter.listener.start(channel.submit)
    await asyncio.to_thread(fake.wait_connected)
    await asyncio.to_thread(fake.user_says, "U0ALICE", "C0GENERAL", f"{MENTION} deploy")
    await channel.until(lambda: channel.submitted, "a submitted message")
    parsed = await channel.parse(channel.submitted[0])
    assert parsed.sender_allowed
    assert parsed.room_title == "#general"
    assert parsed.sender_name == "Alice"


async def test_a_file_over_the_limit_is_named_in_the_thread_not_downloaded(
    fake_slack: FakeSlack, tmp_path: Path, state_database: Database
) -> None:
    fake_slack.add_user("U0ALICE", "Alice")
    fake_slack.add_channel("C0GENERAL", "general")
    channel = Channel(
        fake_slack, tmp_path / "state", state_database, allow_workspace=True, max_file_bytes=10
    )
    await channel.adapter.listener.start(channel.submit)
    await asyncio.to_thread(fake_slack.wait_connected)
    files = [("small.txt", b"tiny"), ("big.bin", b"x" * 100)]
    ts = await asyncio.to_thread(
        fake_slack.user_says, "U0ALICE", "C0GENERAL", f"{MENTION} look", files=files
    )
    await channel.until(lambda: channel.submitted, "a submitted message")
    parsed = await channel.parse(channel.submitted[0])

    (tmp_path / "conversation" / "inbox").mkdir(parents=True)
    inbox = InboxWriter(tmp_path / "conversation")
    saved = await channel.adapter.save_attachments(parsed, inbox)

    assert saved == ["small.txt"]
    assert (tmp_path / "conversation" / "inbox" / "small.txt").read_bytes() == b"tiny"
    assert not (tmp_path / "conversation" / "inbox" / "big.bin").exists()
    [notice] = fake_slack.texts("C0GENERAL", ts)
    assert "big.bin is 100 bytes, over the 10 bytes limit" in notice
    await channel.adapter.listener.stop()


async def test_a_post_in_flight_when_the_listener_stops_still_arrives(channel: Channel) -> None:
    """The listener stops (the daemon shutting down, a replica losing its lease) while a
    reply is on its way: the reply's call ends normally. The kept connections were closed
    under it, and slack_sdk's retry then used the closed session: the reply failed."""
    fake = channel.fake
    await channel.adapter.listener.start(channel.submit)
    await asyncio.to_thread(fake.wait_connected)
    asked = await asyncio.to_thread(fake.user_says, "U0BOB", "C0GENERAL", f"{MENTION} hi")
    await channel.until(lambda: channel.submitted, "the message handed on")
    message = await channel.parse(channel.submitted[0])
    fake.hold_post = "Nearly there"
    posting = asyncio.create_task(
        channel.adapter.send_rejection(message.channel_context, "Nearly there")
    )
    assert await asyncio.to_thread(fake.held.wait, 30), "the post reached Slack"
    await channel.adapter.listener.stop()
    fake.release()
    await asyncio.wait_for(posting, 30)
    assert [t for t in fake.texts("C0GENERAL", asked) if "Nearly there" in t]
