"""Retrying calls into channels: a homeserver hiccup must not strand a task until restart.

A refusal (AuthenticationError) is an answer, not a failure, and is never retried. After
the last attempt the error propagates: the task then stays where the store has it, and the
start-up recovery of the next run picks it up again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_not_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from gateway_bot.core.channel import AuthenticationError

log = logging.getLogger(__name__)

T = TypeVar("T")

ATTEMPTS = 5
"""With exponential waits of 1, 2, 4, 8 s: about a quarter of a minute of patience."""


async def call_channel(what: str, call: Callable[[], Awaitable[T]]) -> T:
    def note(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        log.warning("%s failed (attempt %d of %d): %s", what, state.attempt_number, ATTEMPTS, error)

    retrying = AsyncRetrying(
        retry=retry_if_not_exception_type(AuthenticationError),
        stop=stop_after_attempt(ATTEMPTS),
        wait=wait_exponential(multiplier=1, max=8),
        before_sleep=note,
        reraise=True,
    )

    async def attempt() -> T:
        # tenacity awaits only coroutine functions; a lambda returning an awaitable is not one.
        return await call()

    return await retrying(attempt)
