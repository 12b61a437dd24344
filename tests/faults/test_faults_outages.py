"""Channel outages the older tests leave out: each channel says it is degraded (in the
status snapshot ``gateway-bot status`` reads), recovers by itself, and loses nothing.

Already covered elsewhere: Dovecot restarted mid-IDLE (``test_email_resilience.py``), the
homeserver unreachable mid-sync (``test_matrix_health.py``, a switchable proxy, in
process), the Slack websocket dropped mid-task (``test_slack_daemon.py``) and a listener
that ends (``test_slack_listener_resilience.py``).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write_config
from tests.support.email_fixtures import ALICE, Dovecot, SmtpCatcher, email_config, mail, text_of
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import APP_TOKEN, BOT_TOKEN, TEAM, FakeSlack
from tests.support.fast_agent import fast_agent_sections
from tests.support.synapse_fixtures import SynapseServer, bot_text, matrix_config, membership

pytestmark = pytest.mark.slow


def channel_health(state_dir: Path, channel: str) -> dict[str, Any] | None:
    """The channel's entry in the daemon's status snapshot (``core/status/snapshot.py``)."""
    try:
        snapshot = json.loads((state_dir / "daemon-status.json").read_text())
    except (OSError, ValueError):
        return None
    return next((c for c in snapshot["channels"] if c["name"] == channel), None)


def wait_for_health(
    state_dir: Path, channel: str, health: str, daemon: Any, timeout: float = 120
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        shown = channel_health(state_dir, channel)
        if shown is not None and shown["health"] == health:
            return shown
        assert time.monotonic() < deadline, f"{channel} never {health}: {shown}\n{daemon.stderr}"
        time.sleep(0.1)


def test_an_smtp_server_refusing_mail_degrades_the_channel_and_the_reply_goes_out_once(
    gateway,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    dovecot: Dovecot,
    smtp_catcher: SmtpCatcher,
    mailbox: str,
) -> None:
    """The server answers 451 to every recipient until the channel reports it (a minute in
    life; here as long as it takes the status to show it); the reply waits, retried, and
    goes out once the server takes mail again."""
    config = email_config(
        tmp_path, target_repo, fake_api, dovecot, smtp_catcher, mailbox,
        sections=fast_agent_sections(tmp_path),
    )  # fmt: skip
    state = tmp_path / "state"
    daemon = gateway("run", "--config", str(config))
    wait_for_health(state, "email", "connected", daemon)
    smtp_catcher.refusing = True
    dovecot.deliver(mailbox, mail("Refused", "SMTP-REFUSED please", to=mailbox))

    shown = wait_for_health(state, "email", "degraded", daemon)
    assert "SMTP" in shown["message"], shown
    assert "451" in shown["message"], shown
    smtp_catcher.refusing = False
    smtp_catcher.wait_for(ALICE, where=lambda m: "Echo: SMTP-REFUSED" in text_of(m))
    wait_for_health(state, "email", "connected", daemon)

    dovecot.deliver(mailbox, mail("Later", "AFTER-OUTAGE please", to=mailbox))
    smtp_catcher.wait_for(ALICE, where=lambda m: "Echo: AFTER-OUTAGE" in text_of(m))
    answers = [text_of(m) for m in smtp_catcher.to(ALICE)]
    assert sum("Echo: SMTP-REFUSED" in a for a in answers) == 1, answers
    assert daemon.process.poll() is None


async def test_synapse_restarted_mid_sync_degrades_matrix_and_loses_nothing(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
) -> None:
    """The homeserver itself goes down while the bot's long poll is open (not a proxy in
    between): the channel reports it, a message said just before is answered once, and so
    is one said after the restart."""
    alice = await meet("alice")
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id])
    config = matrix_config(
        tmp_path, target_repo, fake_api, synapse, bot, [alice.user_id],
        sync_timeout_seconds=5, sections=fast_agent_sections(tmp_path),
    )  # fmt: skip
    state = tmp_path / "state"
    daemon = gateway("run", "--config", str(config))
    await alice.wait_for(room, membership(bot.user_id, "join"))
    await asyncio.to_thread(wait_for_health, state, "matrix", "connected", daemon)

    await alice.say(room, "BEFORE-RESTART please")
    synapse.stop()
    try:
        await asyncio.to_thread(wait_for_health, state, "matrix", "degraded", daemon)
    finally:
        synapse.start()
    await asyncio.to_thread(wait_for_health, state, "matrix", "connected", daemon)
    await alice.say(room, "AFTER-RESTART please")

    for word in ("BEFORE-RESTART", "AFTER-RESTART"):
        await alice.wait_for(room, bot_text(bot.user_id, rf"Echo: .*{word} please"), 120)
    history = await alice.history(room)
    for word in ("BEFORE-RESTART", "AFTER-RESTART"):
        echoes = [e for e in history if bot_text(bot.user_id, rf"Echo: .*{word} please")(e)]
        assert len(echoes) == 1, f"{word}: answered {len(echoes)} times"
    assert daemon.process.poll() is None


def test_a_dropped_slack_websocket_degrades_the_channel_and_loses_nothing(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    """The websocket is cut and Slack will not give a new one for a while: the channel
    says so; a message said meanwhile arrives once the socket is back, answered once."""
    fake_slack.add_user("U0ALICE", "Alice")
    fake_slack.add_channel("D0ALICE", im_with="U0ALICE")
    settings = {
        "bot_token": BOT_TOKEN,
        "app_token": APP_TOKEN,
        "team_ids": [TEAM],
        "allowed_users": ["U0ALICE"],
        "api_base_url": fake_slack.base_url,
        "reconnect_max_delay_seconds": 1.0,
    }
    config = write_config(
        tmp_path, target_repo, fake_api, channels={"console": None, "slack": settings},
        **fast_agent_sections(tmp_path),
    )  # fmt: skip
    state = tmp_path / "state"
    daemon = gateway("run", "--config", str(config))
    fake_slack.wait_connected()
    wait_for_health(state, "slack", "connected", daemon)

    fake_slack.connection_error = "internal_error"
    fake_slack.drop_sockets()
    during = fake_slack.user_says("U0ALICE", "D0ALICE", "SAID-OFFLINE please")
    wait_for_health(state, "slack", "degraded", daemon)
    fake_slack.connection_error = None
    wait_for_health(state, "slack", "connected", daemon)

    fake_slack.wait_for_reply("D0ALICE", during, "Echo: SAID-OFFLINE please")
    fake_slack.wait_until(lambda: not fake_slack.pending, what="every envelope acknowledged")
    echoes = [t for t in fake_slack.texts("D0ALICE", during) if "Echo: SAID-OFFLINE" in t]
    assert len(echoes) == 1, echoes
    assert daemon.process.poll() is None
