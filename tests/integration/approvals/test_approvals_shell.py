"""An owner decides approvals from the shell while the real daemon runs (Slack, against the
fake Slack): `gateway-bot approvals` lists what waits, `gateway-bot approve CODE --as OWNER`
runs the held message once and the card in chat says who decided, a non-owner's `--as`
decides nothing, `deny` drops, and with no daemon running the command says so."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import gateway_env
from tests.integration.slack.test_slack_daemon import (
    ALICE,
    APPROVALS,
    BOB,
    CAROL,
    GENERAL,
    MENTION,
    people,
    slack_config,
    start_socket_daemon,
)
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import FakeSlack

pytestmark = pytest.mark.slow

ACCESS = {
    "owners": {"slack": [ALICE]},
    "approval_destination": {"channel": "slack", "context": {"channel": APPROVALS}},
}


def shell(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway_bot", *args],
        capture_output=True,
        text=True,
        env=gateway_env(),
        timeout=180,
        check=False,
    )


def pending(config: Path) -> list[dict[str, Any]]:
    listed = shell("approvals", "--config", str(config), "--json")
    assert listed.returncode == 0, listed.stderr
    found: list[dict[str, Any]] = json.loads(listed.stdout)
    return found


def card_text(fake: FakeSlack, ts: str) -> str:
    return str(fake.thread(APPROVALS, ts)[0]["blocks"][0]["text"]["text"])


def test_an_owner_decides_from_the_shell_while_the_daemon_runs(
    gateway: Any,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    fake_slack: FakeSlack,
) -> None:
    people(fake_slack)
    config = slack_config(tmp_path, target_repo, fake_api, fake_slack, access=ACCESS)
    daemon = start_socket_daemon(gateway, fake_slack, config)

    asked = fake_slack.user_says(BOB, GENERAL, f"{MENTION} SHELL-ASK one")
    card = fake_slack.wait_until(
        lambda: next(iter(fake_slack.messages[APPROVALS]), None), what="an approval card"
    )
    [approval] = pending(config)  # recorded before its card was posted
    code = approval["code"]
    assert (approval["channel"], approval["sender_id"]) == ("slack", BOB)
    assert "SHELL-ASK one" in approval["preview"]
    table = shell("approvals", "--config", str(config))
    assert table.returncode == 0, table.stderr
    assert code in table.stdout
    assert "SHELL-ASK one" in table.stdout
    assert "gateway-bot approve|deny CODE --as OWNER" in table.stdout

    refused = shell("approve", code, "--as", CAROL, "--config", str(config))
    assert refused.returncode == 1, refused
    assert f"{CAROL} is not an owner or admin of this bot: nothing was decided." in refused.stderr
    assert "Unknown sender" in card_text(fake_slack, card["ts"]), "still undecided"

    allowed = shell("approve", code, "--as", ALICE, "--config", str(config))
    assert allowed.returncode == 0, allowed
    assert "Allowed Bob in" in allowed.stdout
    assert "running 1 held message(s)" in allowed.stdout
    fake_slack.wait_for_reply(GENERAL, asked, "Echo: SHELL-ASK one")
    assert f"Allowed by {ALICE}" in card_text(fake_slack, card["ts"]), "the card says who"

    again = shell("approve", code, "--as", ALICE, "--config", str(config))
    assert again.returncode == 1
    assert f"Approval {code} was already allowed." in again.stderr
    later = fake_slack.user_says(BOB, GENERAL, f"{MENTION} SHELL-ASK two")
    fake_slack.wait_for_reply(GENERAL, later, "Echo: SHELL-ASK two")  # Bob is a member now
    replies = [t for t in fake_slack.texts(GENERAL, asked) if "Echo: SHELL-ASK one" in t]
    assert len(replies) == 1, "the held message ran once"

    carol = fake_slack.user_says(CAROL, GENERAL, f"{MENTION} SHELL-ASK carol")
    fake_slack.wait_until(
        lambda: len(fake_slack.messages[APPROVALS]) == 2, what="a card about Carol"
    )
    [second] = pending(config)
    assert "SHELL-ASK carol" in second["preview"], "Bob's was decided: only Carol's waits"
    denied = shell("deny", second["code"], "--as", ALICE, "--config", str(config))
    assert denied.returncode == 0, denied
    assert "Denied Carol in" in denied.stdout
    assert "1 held dropped" in denied.stdout
    assert pending(config) == []
    assert not [t for t in fake_slack.texts(GENERAL, carol) if "SHELL-ASK carol" in t]

    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr
    down = shell("approve", second["code"], "--as", ALICE, "--config", str(config))
    assert down.returncode == 4
    assert "The daemon is not running" in down.stderr
