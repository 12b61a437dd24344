"""Engage rules per room, as pure data: DMs always, group rooms on mention, or a pattern."""

from __future__ import annotations

import dataclasses

import pytest

from gateway_bot.config.access import AccessSettings, EngageMode, RoomSettings
from gateway_bot.core.admission.engagement import engages
from gateway_bot.domain.messages import InboundMessage

ROOM = InboundMessage(
    "matrix", "$1", "@bob:hs", "Bob", "deploy it", "!room:hs", 0.0, room="!room:hs"
)


def message(**changes: object) -> InboundMessage:
    return dataclasses.replace(ROOM, **changes)  # type: ignore[arg-type]


def test_defaults_dm_every_message_group_only_mentions() -> None:
    defaults = RoomSettings()
    assert engages(message(is_direct=True), defaults, False)
    assert not engages(message(), defaults, False)
    assert engages(message(mentioned=True), defaults, False)


@pytest.mark.parametrize(
    ("pattern", "body", "expected"),
    [(".", "anything", True), (r"^bot[,:]", "bot: run tests", True), (r"^bot[,:]", "hi", False)],
)
def test_pattern_mode(pattern: str, body: str, expected: bool) -> None:
    room = RoomSettings(engage=EngageMode.PATTERN, pattern=pattern)
    assert engages(message(body=body), room, False) is expected


def test_mention_sticky_engages_the_rest_of_a_started_thread() -> None:
    room = RoomSettings(engage=EngageMode.MENTION_STICKY)
    assert not engages(message(), room, conversation_started=False)
    assert engages(message(mentioned=True), room, conversation_started=False)
    assert engages(message(), room, conversation_started=True)
    assert engages(message(is_direct=True), room, conversation_started=False)


def test_room_settings_first_match_wins_and_channel_filters() -> None:
    access = AccessSettings(
        rooms=[
            RoomSettings(match="!room:hs", channel="slack", engage=EngageMode.PATTERN),
            RoomSettings(match="!room:hs", engage=EngageMode.MENTION_STICKY),
            RoomSettings(match="*", engage=EngageMode.MENTION),
        ]
    )
    assert access.room_settings("matrix", "!room:hs").engage is EngageMode.MENTION_STICKY
    assert access.room_settings("slack", "!room:hs").engage is EngageMode.PATTERN
    assert access.room_settings("matrix", "!other:hs").engage is EngageMode.MENTION


def test_a_bad_pattern_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="not a valid regular expression"):
        RoomSettings(engage=EngageMode.PATTERN, pattern="(unclosed")
