"""The one retry policy for calls into channels: transport failures are retried, nothing else.

Why only transport failures: a homeserver that is down or a 429 may pass in seconds, but a
payload the channel cannot parse, a refusal (AuthenticationError) or a thread that no
longer takes replies will fail the same way every time; retrying them only holds others up.
Why one policy applied once: a channel that retried by itself inside the core's retries
multiplied the waits (Matrix's own minute inside five core attempts). Channels make one
attempt per call and say what failed; the core decides whether and when to try again, and
never sleeps between attempts while holding the intake lock (callers take the lock per
attempt).

What counts as transient (``is_transient``), without the core importing any channel:
- an exception with a boolean ``transient`` attribute says so itself (the Matrix channel's
  ``MatrixError``: unreachable, 5xx, 429);
- connection trouble: ``ConnectionError``, ``TimeoutError``, ``aiohttp.ClientError`` (a
  ``ClientResponseError`` only for 429 and 5xx);
- an HTTP client error carrying ``response.status_code`` (slack_sdk's ``SlackApiError``):
  429 and 5xx. Slack answers most refusals with 200 and ``ok: false``: not retried.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from gateway_bot.core.channel import AuthenticationError

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    first_wait_s: float = 1.0
    max_wait_s: float = 8.0


DEFAULT_POLICY = RetryPolicy()
"""Waits of 1, 2, 4, 8 s: about a quarter of a minute of patience per call. What still fails
after that is parked where the store has it and taken up again later (the service's sweep,
or the next start)."""


def is_transient(error: BaseException) -> bool:
    """Could the same call succeed if made again in a few seconds?"""
    if isinstance(error, AuthenticationError):
        return False
    marked = getattr(error, "transient", None)
    if isinstance(marked, bool):
        return marked
    if "aiohttp" in sys.modules:
        # Only a channel that imported aiohttp can have raised its errors; importing it here
        # would cost every start 0.3 s, console-only ones included (AGENTS.md: imports).
        import aiohttp

        if isinstance(error, aiohttp.ClientResponseError):
            return _retryable_status(error.status)
        if isinstance(error, aiohttp.ClientError):
            return True
    if isinstance(error, ConnectionError | TimeoutError):
        return True
    status = getattr(getattr(error, "response", None), "status_code", None)
    return isinstance(status, int) and _retryable_status(status)


def log_failure(logger: logging.Logger, message: str, *args: object, error: BaseException) -> None:
    """A failed call into a channel, logged once: a known outage (``is_transient``: the
    homeserver down, Slack answering 503) is one line with the error, not a traceback per
    failed call; anything else keeps its traceback, to be looked into."""
    if is_transient(error):
        logger.warning(message + ": %s", *args, _one_line(error))
    else:
        logger.warning(message, *args, exc_info=error)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())[:300]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _retryable_status(status: int) -> bool:
    return status == 429 or status >= 500


def retrying(what: str, policy: RetryPolicy = DEFAULT_POLICY) -> AsyncRetrying:
    """The policy as a tenacity loop (``call_channel`` enters it after a first failure)."""

    def note(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        log.warning(
            "%s failed (attempt %d of %d): %s",
            what,
            state.attempt_number,
            policy.attempts,
            error or "",
        )

    return AsyncRetrying(
        retry=retry_if_exception(is_transient),
        stop=stop_after_attempt(policy.attempts),
        wait=wait_exponential(
            multiplier=policy.first_wait_s, min=policy.first_wait_s, max=policy.max_wait_s
        ),
        before_sleep=note,
        reraise=True,
    )


async def call_channel(
    what: str, call: Callable[[], Awaitable[T]], policy: RetryPolicy = DEFAULT_POLICY
) -> T:
    """Call, retrying transport failures; the last failure (or any other) propagates.

    The first attempt is made before tenacity is: its loop costs ~150 us on a path that
    has been idle (issue 33: twice on a message's way to its acknowledgement), and most
    calls succeed at once. A transient failure is then tenacity's first attempt, so the
    policy (waits, attempts, the log of each failure) is tenacity's alone."""
    try:
        return await call()
    except Exception as exc:
        if not is_transient(exc):
            raise
        failed: Exception | None = exc

    async def attempt() -> T:
        nonlocal failed
        if failed is not None:
            error, failed = failed, None
            raise error
        return await call()

    return await retrying(what, policy)(attempt)
