"""A known outage is one log line per failed call, not a traceback each time: with the
homeserver down during a task, every progress update fails, and an operator reading the log
sees what failed and why, once per failure. An error nobody expected keeps its traceback."""

from __future__ import annotations

import logging

import pytest

from tests.core.conftest import World


async def test_progress_failing_in_an_outage_logs_one_line_each(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.channel.fail("progress")  # the homeserver is down for every progress edit
    with caplog.at_level(logging.WARNING, logger="gateway_bot.core.conversations.progress"):
        assert (await world.reply(await world.say("do step"))).text == "Echo: do step"
    failures = [r for r in caplog.records if "progress update for task" in r.getMessage()]
    assert failures, "the failed progress update is logged"
    for record in failures:
        assert record.exc_info is None, "a known outage logs no traceback"
        assert "ConnectionError: the homeserver is down" in record.getMessage()
        assert "\n" not in record.getMessage()


async def test_an_unexpected_failure_keeps_its_traceback(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.channel.fail("progress", error=lambda: ValueError("a bug in the renderer"))
    with caplog.at_level(logging.WARNING, logger="gateway_bot.core.conversations.progress"):
        assert (await world.reply(await world.say("do step"))).text == "Echo: do step"
    failures = [r for r in caplog.records if "progress update for task" in r.getMessage()]
    assert failures
    assert all(r.exc_info is not None for r in failures)
