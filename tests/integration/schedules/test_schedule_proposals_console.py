"""The agent proposes schedules (``outbox/schedule.json``) with the real daemon and the real
Claude Code CLI at the console: a card, Deny creates nothing, Allow creates it; a request
that breaks the rules gets a clear note and no card. The request file is hostile input:
a link to a host file, a huge file and broken JSON are refused, and the file is never sent
back as an attachment."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.support.fake_anthropic import FakeAnthropic


def _propose(**fields: str) -> str:
    return "WRITE_FILE name=../outbox/schedule.json text=" + json.dumps(fields)


def test_agent_request_is_carded_denied_then_allowed(
    gateway, config_path: Path, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(config_path))
    chat.expect(r"^gateway-bot console · conversation default")

    chat.send(_propose(when="every day at 9:00", prompt="check the nightly build", tz="Asia/Tokyo"))
    chat.expect(r"^agent> Echo:")
    chat.expect(r"^\[The agent asks to schedule a run\]$")
    body = chat.expect(r'^The agent asks to run this in this conversation, `"0 9 \* \* \*"')
    assert "Asia/Tokyo" in body
    assert "JST" in body
    chat.expect(r"^check the nightly build$")
    decide = chat.expect(r"Or reply !approve [0-9a-f]{12} or !deny [0-9a-f]{12}\.$")
    code = re.findall(r"!approve ([0-9a-f]{12})", decide)[0]
    assert chat.count(r"\[file\].*schedule\.json") == 0, "the request is never an attachment"

    chat.send(f"/deny {code}")
    chat.expect(rf"^agent> Denied the agent's schedule request {code}: nothing was scheduled\.$")
    chat.send("/schedules")
    chat.expect(r"^agent> No schedules in this conversation\.")
    chat.send(f"/approve {code}")
    chat.expect(rf"^agent> Schedule request {code} was already denied\.$")

    chat.send(_propose(when="0 7 * * 1-5", prompt="summarize the open pull requests"))
    chat.expect(r"^\[The agent asks to schedule a run\]$", timeout=120)
    decide = chat.expect(r"Or reply !approve [0-9a-f]{12}")
    second = re.findall(r"!approve ([0-9a-f]{12})", decide)[0]
    assert second != code
    chat.send(f"!approve {second}")
    chat.expect(
        r'^agent> Scheduled #1: "0 7 \* \* 1-5" \(At 07:00 on Monday through Friday, UTC\): '
        r"summarize the open pull requests$"
    )
    chat.send("/schedules")
    chat.expect(r'^#1 "0 7 \* \* 1-5" .*: summarize the open pull requests$')
    chat.finish()
    # Only the run that wrote the file reached the agent; the decisions did not.
    asked = " ".join(" ".join(fake_api.user_texts(r)) for r in fake_api.requests)
    assert "approve" not in asked


def test_requests_breaking_the_rules_get_a_note_and_no_card(
    gateway, config_path: Path, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(config_path))
    chat.expect(r"^gateway-bot console · conversation default")
    chat.send(_propose(when="*/1 * * * *", prompt="poll"))
    chat.expect(
        r"^refused> The agent asked to schedule a run\. Not scheduled: .* the shortest "
        r"interval allowed is 5 minutes\.$",
        timeout=120,
    )
    chat.send(_propose(when="every day at 9:00", prompt="x", tz="Mars/Olympus"))
    chat.expect(r"^refused> The agent's schedule request .* Unknown time zone 'Mars/Olympus'")
    chat.send(_propose(when="every fortnight", prompt="x"))
    chat.expect(r"^refused> The agent's schedule request .* Invalid cron rule 'every fortnight'")
    chat.send("WRITE_FILE name=../outbox/schedule.json text={not json")
    chat.expect(r"^refused> The agent's schedule request was not used: schedule\.json is not valid")
    chat.send("/schedules")
    chat.expect(r"^agent> No schedules in this conversation\.")
    chat.finish()
    assert chat.count(r"The agent asks to schedule a run") == 0


def test_a_link_or_a_huge_request_file_is_refused_and_never_sent(
    gateway, config_path: Path, fake_api: FakeAnthropic, tmp_path: Path
) -> None:
    """The attack: the agent links schedule.json to a host file holding a valid request (a
    reader that followed the link would card it, or send the host file as an attachment),
    then writes a request far over the size cap."""
    host_file = tmp_path / "host-secret.json"
    host_file.write_text(json.dumps({"when": "every day at 9:00", "prompt": "HOST-SECRET"}))
    chat = gateway("chat", "--config", str(config_path))
    chat.expect(r"^gateway-bot console · conversation default")
    chat.send(f"RUN_BASH ln -s {host_file} ../outbox/schedule.json")
    chat.expect(
        r"^refused> The agent's schedule request was not used: schedule\.json is a symbolic "
        r"link, not a file: ignored\.$",
        timeout=120,
    )
    chat.send("RUN_BASH head -c 200000 /dev/zero | tr '\\0' ' ' > ../outbox/schedule.json")
    chat.expect(
        r"^refused> The agent's schedule request was not used: schedule\.json has 200,000 "
        r"bytes, more than the 16,384 allowed: ignored\.$"
    )
    chat.send("RUN_BASH ls -la ../outbox")
    chat.expect(r"^agent> Echo:")
    chat.send("/schedules")
    chat.expect(r"^agent> No schedules in this conversation\.")
    chat.finish()
    assert chat.count("HOST-SECRET") == 0
    assert chat.count(r"\[file\]") == 0, "neither file went out as an attachment"
    assert host_file.exists(), "the link was removed, not its target"
    outboxes = list((tmp_path / "state").rglob("outbox"))
    assert outboxes
    assert all(not (o / "schedule.json").exists() for o in outboxes)
    assert not any((o / "schedule.json").is_symlink() for o in outboxes)
