"""A user at the console schedules a run with the real daemon (`gateway-bot chat`): the
bot echoes the normalized rule and the next runs in the zone given, lists it, pauses and
removes it, and refuses a rule that runs too often. Firing is covered in tests/core, where
the clock is the test's (a real run would mean waiting for it)."""

from __future__ import annotations

from pathlib import Path

from tests.support.fake_anthropic import FakeAnthropic


def test_schedule_echo_listing_pause_and_unschedule(
    gateway, config_path: Path, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(config_path))
    chat.expect(r"^gateway-bot console · conversation default")
    chat.send('/schedule TZ=Europe/Berlin "30 2 * * *" check the nightly build')
    chat.expect(
        r'^agent> Scheduled #1: "30 2 \* \* \*" \(At 02:30 every day, Europe/Berlin\): '
        r"check the nightly build$"
    )
    chat.expect(r"^Next runs: \w{3} \d{4}-\d\d-\d\d 0[23]:\d\d CES?T; .* CES?T; .* CES?T\.$")
    chat.send("/schedules")
    chat.expect(r"^agent> Schedules in this conversation:$")
    chat.expect(r'^#1 "30 2 \* \* \*" .*, next \w{3} \d{4}-\d\d-\d\d 0[23]:\d\d CES?T: check')
    chat.send("/pause 1")
    chat.expect(r"^agent> Paused schedule #1\. /resume 1 to run it again\.$")
    chat.send('/schedule "* * * * *" poll')
    chat.expect(r"^agent> Not scheduled: .* the shortest interval allowed is 5 minutes\.$")
    chat.send("/unschedule 1")
    chat.expect(r"^agent> Removed schedule #1\.$")
    chat.send("/schedules")
    chat.expect(r"^agent> No schedules in this conversation\.")
    chat.finish()
    # Commands never reach the agent (the fake serves the whole session: look for our words).
    asked = " ".join(" ".join(fake_api.user_texts(r)) for r in fake_api.requests)
    assert "nightly build" not in asked
    assert "poll" not in asked
