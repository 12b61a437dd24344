"""The small pure rules the core's behaviour rests on: which failures are worth retrying,
which task moves are legal, and which prompts are empty."""

from __future__ import annotations

import logging

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.slack_response import SlackResponse

from gateway_bot.core.admission.engagement import is_blank
from gateway_bot.core.channel import AuthenticationError
from gateway_bot.core.retries import RetryPolicy, call_channel, is_transient
from gateway_bot.domain.lifecycle import IllegalTransition, TaskState, check_transition


def slack_error(status: int, error: str) -> SlackApiError:
    response = SlackResponse(
        client=None,
        http_verb="POST",
        api_url="https://slack.test/api/chat.postMessage",
        req_args={},
        data={"ok": False, "error": error},
        headers={},
        status_code=status,
    )
    return SlackApiError(error, response)


class MarkedError(Exception):
    """A channel's own error that says whether it may pass (as Matrix's does)."""

    def __init__(self, transient: bool) -> None:
        super().__init__("marked")
        self.transient = transient


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (ConnectionError("refused"), True),
        (TimeoutError(), True),
        (aiohttp.ClientConnectionError("reset"), True),
        (slack_error(429, "ratelimited"), True),
        (slack_error(503, "service_unavailable"), True),
        (slack_error(200, "channel_not_found"), False),
        (slack_error(200, "is_archived"), False),
        (MarkedError(transient=True), True),
        (MarkedError(transient=False), False),
        (AttributeError("'str' object has no attribute 'get'"), False),
        (KeyError("event"), False),
        (TypeError("bad type"), False),
        (ValueError("bad value"), False),
        (AuthenticationError("mallory", "not a member"), False),
    ],
)
def test_only_transport_errors_are_retried(error: BaseException, retried: bool) -> None:
    assert is_transient(error) is retried


def test_a_response_error_is_retried_by_its_status() -> None:
    def response_error(status: int) -> aiohttp.ClientResponseError:
        return aiohttp.ClientResponseError(None, (), status=status)  # type: ignore[arg-type]

    assert is_transient(response_error(502))
    assert is_transient(response_error(429))
    assert not is_transient(response_error(404))


@pytest.mark.parametrize(
    ("text", "blank"),
    [
        ("", True),
        ("   \n\t", True),
        ("\u200b", True),
        ("\u2060\ufeff\u200e", True),
        ("\u00ad ", True),
        ("hi", False),
        ("\u200bhi", False),
        ("é", False),
        ("👍", False),
    ],
)
def test_blank_prompts(text: str, blank: bool) -> None:
    assert is_blank(text) is blank


def test_an_undelivered_reply_is_sent_again_never_run_again() -> None:
    check_transition(TaskState.EXECUTING, TaskState.UNDELIVERED)
    check_transition(TaskState.UNDELIVERED, TaskState.COMPLETED)
    for target in (TaskState.EXECUTING, TaskState.PENDING, TaskState.QUEUED):
        with pytest.raises(IllegalTransition):
            check_transition(TaskState.UNDELIVERED, target)


async def test_a_call_is_made_once_then_retried_by_the_policy_after_a_transient_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``call_channel`` makes the first attempt itself (tenacity's loop costs ~150 us on a
    path that sat idle, issue 33); from a transient failure on, the policy is tenacity's:
    every failure logged with its number, then the last one raised."""
    policy = RetryPolicy(attempts=3, first_wait_s=0.001, max_wait_s=0.002)
    calls: list[int] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionResetError("the room's server went away")
        return "sent"

    caplog.set_level(logging.WARNING, logger="gateway_bot.core.retries")
    assert await call_channel("posting", flaky, policy) == "sent"
    assert len(calls) == 3
    assert [r.getMessage() for r in caplog.records] == [
        "posting failed (attempt 1 of 3): the room's server went away",
        "posting failed (attempt 2 of 3): the room's server went away",
    ]

    async def down() -> str:
        calls.append(1)
        raise ConnectionResetError("still away")

    calls.clear()
    with pytest.raises(ConnectionResetError, match="still away"):
        await call_channel("posting", down, policy)
    assert len(calls) == 3

    async def refused() -> str:
        calls.append(1)
        raise PermissionError("not a transport failure")

    calls.clear()
    with pytest.raises(PermissionError):
        await call_channel("posting", refused, policy)
    assert len(calls) == 1, "a failure that is not transient is not retried"
