"""The Slack listener survives what Slack (or something posing as it) sends: an envelope Bolt
cannot make a request of is logged, acknowledged and dropped; a listener task that ends
for any reason is restarted with backoff and shows as channel health; a signed body that is
not JSON is a 400, not a 500 Slack would retry. In-process against the fake Slack."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway_bot.channels.slack import SlackAdapter
from gateway_bot.config.channels import SlackChannelSettings
from gateway_bot.core.retries import is_transient
from gateway_bot.domain.messages import ChannelHealth, RawMessage
from gateway_bot.state.database import Database
from tests.support.fake_slack import (
    APP_TOKEN,
    BOT_ID,
    BOT_TOKEN,
    BOT_USER,
    SIGNING_SECRET,
    TEAM,
    FakeSlack,
)

MENTION = f"<@{BOT_USER}>"


class Listening:
    """A Slack adapter whose listener submits into a list, as the core's submit would."""

    def __init__(self, fake: FakeSlack, state: Path, database: Database, **settings: Any) -> None:
        self.fake = fake
        self.adapter = SlackAdapter(
            SlackChannelSettings(
                bot_token=BOT_TOKEN,
                app_token=APP_TOKEN,
                team_ids=[TEAM],
                api_base_url=fake.base_url,
                reconnect_max_delay_seconds=0.2,
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

    @property
    def health(self) -> ChannelHealth:
        return self.adapter.listener.status.health

    def texts(self) -> list[str]:
        return [str(raw.payload["event"].get("text")) for raw in self.submitted]


@pytest.fixture
async def slack(
    fake_slack: FakeSlack, tmp_path: Path, state_database: Database
) -> AsyncIterator[Listening]:
    fake_slack.add_user("U0ALICE", "Alice")
    fake_slack.add_channel("C0GENERAL", "general")
    made = Listening(fake_slack, tmp_path, state_database)
    yield made
    await made.adapter.listener.stop()


def envelope(envelope_id: str, payload: Any) -> dict[str, Any]:
    return {
        "envelope_id": envelope_id,
        "type": "events_api",
        "accepts_response_payload": False,
        "retry_attempt": 0,
        "retry_reason": "",
        "payload": payload,
    }


def message_event(**overrides: Any) -> dict[str, Any]:
    event = {
        "type": "message",
        "channel": "C0GENERAL",
        "user": "U0ALICE",
        "text": f"{MENTION} hi",
        "ts": "1700000000.000100",
        "channel_type": "channel",
    }
    return event | overrides


BAD_ENVELOPES = {
    "event is a string": {"type": "event_callback", "team_id": TEAM, "event": "oops"},
    "numeric channel": {
        "type": "event_callback",
        "team_id": TEAM,
        "event": message_event(channel=42),
    },
    "numeric team": {"type": "event_callback", "team_id": 12345, "event": message_event()},
    "payload is a list": [1, 2],
    "payload is a string": "not an object",
}


async def test_bad_envelopes_are_acked_and_dropped_and_the_next_message_arrives(
    slack: Listening,
) -> None:
    await slack.adapter.listener.start(slack.submit)
    await slack.until(lambda: slack.health is ChannelHealth.CONNECTED, "connected")
    for number, payload in enumerate(BAD_ENVELOPES.values()):
        slack.fake.send_raw(envelope(f"bad-{number}", payload))
    slack.fake.send_raw(["not", "an", "envelope"])
    slack.fake.send_raw({"type": "events_api", "payload": {}})

    slack.fake.user_says("U0ALICE", "C0GENERAL", f"{MENTION} still there?")
    await slack.until(lambda: f"{MENTION} still there?" in slack.texts(), "the good message")
    # Envelopes are handled side by side: the good one may be taken in before the last bad
    # one's ack has crossed the socket (CI saw it), so wait for the acks themselves.
    bad = [f"bad-{number}" for number in range(len(BAD_ENVELOPES))]
    await slack.until(
        lambda: all(b in slack.fake.acks for b in bad),
        "every bad envelope acknowledged (not left to be redelivered)",
    )
    assert slack.fake.hellos == 1, "the same connection carried on"
    assert slack.health is ChannelHealth.CONNECTED


async def test_a_listener_that_ends_is_restarted_and_reported(slack: Listening) -> None:
    # connections.open answers a JSON list (a proxy's, a bug's): slack_sdk raises
    # AttributeError, which no connection loop expects.
    slack.fake.connection_answers = [["not", "an", "object"], ["again"]]
    await slack.adapter.listener.start(slack.submit)
    await slack.until(lambda: slack.health is ChannelHealth.DEGRADED, "degraded health")
    assert "restarting" in slack.adapter.listener.status.message
    await slack.until(lambda: slack.health is ChannelHealth.CONNECTED, "reconnected")
    slack.fake.user_says("U0ALICE", "C0GENERAL", f"{MENTION} after the restart")
    await slack.until(lambda: slack.submitted, "a message after the restart")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_a_signed_body_that_is_not_json_is_a_bad_request(
    fake_slack: FakeSlack, tmp_path: Path, state_database: Database
) -> None:
    fake_slack.add_user("U0ALICE", "Alice")
    fake_slack.add_channel("C0GENERAL", "general")
    port = free_port()
    http = Listening(
        fake_slack,
        tmp_path,
        state_database,
        transport="http",
        signing_secret=SIGNING_SECRET,
        http_port=port,
    )
    await http.adapter.listener.start(http.submit)
    try:
        await http.until(lambda: http.health is ChannelHealth.CONNECTED, "listening")
        fake_slack.http_target = f"http://127.0.0.1:{port}/slack/events"
        status = await asyncio.to_thread(fake_slack.post_signed_bytes, b"{not json")
        assert status == 400
        form = await asyncio.to_thread(
            fake_slack.post_signed_bytes, b"payload=%7Bnot", "application/x-www-form-urlencoded"
        )
        assert form == 400
        _, bodies = fake_slack.says("U0ALICE", "C0GENERAL", f"{MENTION} fine")
        assert await asyncio.to_thread(fake_slack.deliver, bodies[0], "http") == 200
        await http.until(lambda: http.submitted, "the good event")
    finally:
        await http.adapter.listener.stop()


async def test_an_event_whose_files_are_not_objects_is_a_parse_error_not_a_retry(
    slack: Listening,
) -> None:
    """The core rejects such a message at once (tests/core: a parse error is not retried)
    only if the adapter's failure does not look like a transport failure."""
    raw = RawMessage(
        channel="slack",
        message_id=f"{TEAM}:C0GENERAL:1700000000.000200",
        sender="U0ALICE",
        payload={
            "kind": "message",
            "team_id": TEAM,
            "bot_user_id": BOT_USER,
            "event": message_event(ts="1700000000.000200", files=["not an object"]),
        },
        received_at=time.time(),
    )
    with pytest.raises(AttributeError) as caught:
        await slack.adapter.authenticate_and_parse(raw)
    assert not is_transient(caught.value)


async def test_the_bots_own_posts_are_not_taken_in_but_its_joining_is(slack: Listening) -> None:
    """Events over Socket Mode skip Bolt's dispatch (decision 0132), so its rule for the
    bot's own events is ours there: a post of the bot's (its user, or only its bot id)
    is acked and dropped, its joining a channel is taken in."""
    await slack.adapter.listener.start(slack.submit)
    await slack.until(lambda: slack.health is ChannelHealth.CONNECTED, "connected")
    own = [
        message_event(user=BOT_USER, text=f"{MENTION} Working on it…"),  # (no bot id)
        message_event(user=None, bot_id=BOT_ID, subtype="bot_message", ts="1700000000.000200"),
    ]
    for number, event in enumerate(own):
        payload = {"type": "event_callback", "team_id": TEAM, "event": event}
        slack.fake.send_raw(envelope(f"own-{number}", payload))
    joined = {
        "type": "member_joined_channel",
        "user": BOT_USER,
        "channel": "C0GENERAL",
        "inviter": "U0ALICE",
        "event_ts": "1700000000.000300",
    }
    slack.fake.send_raw(
        envelope("joined", {"type": "event_callback", "team_id": TEAM, "event": joined})
    )
    await slack.until(lambda: "joined" in slack.fake.acks, "the join acknowledged")
    await slack.until(lambda: all(f"own-{n}" in slack.fake.acks for n in range(2)), "acks")
    assert [raw.payload["kind"] for raw in slack.submitted] == ["joined"]


async def test_an_event_the_core_could_not_store_is_left_for_slack_to_deliver_again(
    slack: Listening,
) -> None:
    """A submit that fails (the state store is down) leaves the envelope unacked: Slack
    delivers it again (here: on the next connection) and it is taken in then."""
    failing, tried = [True], []

    async def submit(raw: RawMessage) -> bool:
        tried.append(raw.message_id)
        if failing[0]:
            raise OSError(5, "the state store is down")
        return await slack.submit(raw)

    await slack.adapter.listener.start(submit)
    await slack.until(lambda: slack.health is ChannelHealth.CONNECTED, "connected")
    slack.fake.user_says("U0ALICE", "C0GENERAL", f"{MENTION} after it")
    await slack.until(lambda: len(tried) >= 1, "the message tried")
    await asyncio.sleep(0.3)  # past the ack's deferral (``ACK_DEFER_S``): nothing acked
    assert slack.fake.acks == []
    assert slack.submitted == []
    failing[0] = False
    slack.fake.send_raw({"type": "disconnect", "reason": "refresh_requested"})
    await slack.until(lambda: f"{MENTION} after it" in slack.texts(), "the message again")
    await slack.until(lambda: not slack.fake.pending, "every envelope of it acked at last")
    assert slack.fake.hellos == 2
