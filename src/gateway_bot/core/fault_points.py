"""A test-only hook that SIGKILLs the daemon the moment it reaches a named point of a
task's life, so the fault suite (``tests/test_faults_*.py``, marker ``faults``) can crash it
exactly there instead of racing a ``kill -9`` against the work.

Set ``GATEWAY_BOT_FAULT_POINT`` to one name of ``POINTS``; the first ``reached(name)`` with
that name kills the process (``SIGKILL``: no cleanup, no flush, as a power cut or the OOM
killer would). The variable is read once, when this module is imported; unset, ``reached``
compares its argument with None and returns. Nothing a chat message, a mail or a config key
holds can arm it: only the daemon's own environment. An unknown name is refused at start-up
(``check_fault_point``) so a typo never makes a fault test pass without a crash.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Mapping

log = logging.getLogger(__name__)

FAULT_POINT_ENV = "GATEWAY_BOT_FAULT_POINT"

POINTS: dict[str, str] = {
    # The core, in the order one task passes them (every channel).
    "received": "a channel handed the message to submit; nothing is stored yet",
    "stored": "the message is committed to the store; the channel has not acked it",
    "routed": "authenticated and queued (PENDING); no acknowledgement sent",
    "acknowledged": "the acknowledgement went out; the task may be starting beside it",
    "executing": "the task is EXECUTING; the workspace is not prepared",
    "sandbox_starting": "the workspace is ready; the agent's sandbox is being started",
    "agent_running": "the agent is running (its first event arrived)",
    "reply_stored": "the agent's reply is in the store; nothing sent",
    "reply_sending": "the reply is being handed to the channel",
    "reply_sent": "the channel took the reply; it is not marked delivered",
    "reply_delivered": "the reply is marked delivered; the task is not completed",
    # Channel-specific: where each channel acknowledges or removes the source.
    "matrix_sync_saved": "Matrix: the sync token moved past the message",
    "slack_acking": "Slack: the Socket Mode ack is about to be sent",
    "slack_acked": "Slack: the Socket Mode ack was sent",
    "slack_post_intended": "Slack: a post's intent is recorded; chat.postMessage not called",
    "slack_posted": "Slack: chat.postMessage answered; the post's ts is not recorded",
    "email_source_removed": "email: the mail was moved or deleted from the folder",
    "email_smtp_accepted": "email: the SMTP server accepted the reply (250), not recorded",
}

_ARMED = os.environ.get(FAULT_POINT_ENV) or None


def reached(point: str) -> None:
    """Die here when the fault hook names ``point``; otherwise nothing."""
    if _ARMED is not None and point == _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)


def check_fault_point(environ: Mapping[str, str]) -> str | None:
    """At start-up: the armed point (logged loudly), None when unset. An unknown name is a
    ValueError naming the known ones."""
    name = environ.get(FAULT_POINT_ENV)
    if not name:
        return None
    if name not in POINTS:
        known = ", ".join(POINTS)
        raise ValueError(f"{FAULT_POINT_ENV}={name!r} is no fault point (known: {known})")
    log.warning(
        "TEST HOOK: %s=%s: the daemon kills itself when it gets there (tests only)",
        FAULT_POINT_ENV,
        name,
    )
    return name
