"""SIGKILL at the points of a task's life, on every channel: afterwards each accepted
message is answered exactly once.

The daemon kills itself exactly where ``GATEWAY_BOT_FAULT_POINT`` says
(``core/fault_points.py``), so each crash is a fact, not a race against a ``kill -9``. One
walk per channel keeps the suite short: daemon after daemon, each armed with the next
point, recovers what the previous one left (its recovery usually carries the same message
to the next point, where it dies again); a point a recovered message cannot reach (intake
and acknowledgement happen once per message) gets a fresh message with its daemon. A last
daemon, unarmed, answers everything still open and one more message; then the user-visible
answers are counted. Every armed daemon must die by SIGKILL: a point never reached fails
the walk, so a renamed or removed ``reached`` call cannot pass unnoticed.

Every channel walks at least ten points: its own (source redelivery and acknowledgement,
its posts, SMTP), the delivery points where channels differ (each keeps a reply from going
out twice its own way), and the core's points between intake and delivery, which the
console walks in full. The agent is
``tests/support/fast_agent.py``'s script: the daemon is under test, not the model.
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from gateway_bot.core.fault_points import FAULT_POINT_ENV, POINTS, check_fault_point
from tests.conftest import GatewayProcess, write_config
from tests.support.email_fixtures import ALICE as MAIL_ALICE
from tests.support.email_fixtures import Dovecot, SmtpCatcher, email_config, mail, text_of
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import APP_TOKEN, BOT_TOKEN, TEAM, FakeSlack
from tests.support.fast_agent import fast_agent_sections
from tests.support.synapse_fixtures import SynapseServer, bot_text, matrix_config, membership

pytestmark = pytest.mark.slow

DEATH_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Step:
    point: str
    fresh: bool = False
    """Send a new message with this daemon (the point is one a recovered message skips)."""


CORE_RUN = [
    Step("executing"),
    Step("sandbox_starting"),
    Step("agent_running"),
    Step("reply_stored"),
    Step("reply_sending"),
]


@pytest.fixture
def daemons() -> Iterator[list[GatewayProcess]]:
    """A failing walk shows what each daemon logged."""
    started: list[GatewayProcess] = []
    yield started
    for daemon in started:
        print(f"--- daemon {daemon.process.args} ---\n{daemon.stderr[-4000:]}")


def walk(
    gateway: Any,
    config: Path,
    steps: list[Step],
    say: Callable[[str], None],
    started: list[GatewayProcess],
    *,
    mode: str = "run",
) -> tuple[list[str], list[GatewayProcess]]:
    """Start one daemon per step, armed with its point; each must die there. Returns the
    words of the messages sent and the daemons."""
    words: list[str] = []
    for number, step in enumerate(steps):
        assert step.point in POINTS, step.point
        daemon = gateway(mode, "--config", str(config), env={FAULT_POINT_ENV: step.point})
        started.append(daemon)
        if step.fresh:
            word = f"FAULT{number:02d}{step.point.replace('_', '')}"
            words.append(word)
            say(word)
        try:
            code = daemon.process.wait(DEATH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the daemon armed at {step.point!r} never got there:\n{daemon.stderr}")
        daemon.drain()
        assert code == -signal.SIGKILL, f"{step.point}: exit {code}\n{daemon.stderr}"
    return words, started


def wait_until(check: Callable[[], Any], what: str, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.2)
    return found


# ----- console ------------------------------------------------------------------------


def test_console_answers_each_message_once_through_every_kill_point(
    gateway,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    daemons: list[GatewayProcess],
) -> None:
    """The console cannot re-read a line its killed process took: the walk starts at
    ``stored``. ``reply_sent`` is left out: stdout keeps no record of what it printed, so a
    reply printed just before the crash is printed again by the next start."""
    steps = [
        Step("stored", fresh=True),
        Step("routed"),
        Step("acknowledged", fresh=True),
        *CORE_RUN,
        Step("reply_delivered"),
    ]
    config_path = write_config(tmp_path, target_repo, fake_api, **fast_agent_sections(tmp_path))

    def say(word: str) -> None:
        daemons[-1].send(f"{word} please")

    words, daemons = walk(gateway, config_path, steps, say, daemons, mode="chat")
    last = gateway("chat", "--config", str(config_path))
    last.send("FAULTLAST please")
    last.expect(r"^agent> Echo: FAULTLAST please$")
    for word in words:
        if not any(d.count(rf"^agent> Echo: {word} please$") for d in [*daemons, last]):
            last.expect(rf"^agent> Echo: {word} please$")
    last.finish()
    for word in [*words, "FAULTLAST"]:
        seen = sum(d.count(rf"^agent> Echo: {word} please$") for d in [*daemons, last])
        assert seen == 1, f"{word}: answered {seen} times"


# ----- Matrix -------------------------------------------------------------------------


async def test_matrix_answers_each_message_once_through_every_kill_point(
    gateway,
    meet,
    synapse: SynapseServer,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    daemons: list[GatewayProcess],
) -> None:
    alice = await meet("alice")
    bot = await synapse.register("bot")
    room = await alice.create_room([bot.user_id])
    config = matrix_config(
        tmp_path, target_repo, fake_api, synapse, bot, [alice.user_id],
        sections=fast_agent_sections(tmp_path),
    )  # fmt: skip
    first = gateway("run", "--config", str(config))  # joins: a sync token to resume from
    daemons.append(first)
    await alice.wait_for(room, membership(bot.user_id, "join"))
    first.kill()

    steps = [
        Step("received", fresh=True),
        Step("stored"),
        Step("matrix_sync_saved"),
        Step("acknowledged", fresh=True),
        Step("executing"),
        Step("sandbox_starting"),
        Step("agent_running"),
        Step("reply_stored"),
        Step("reply_sending"),
        Step("reply_sent"),
    ]
    # The walk blocks (it waits for processes): it runs in a thread, and Alice speaks on
    # this loop.
    loop = asyncio.get_running_loop()

    def say(word: str) -> None:
        asyncio.run_coroutine_threadsafe(alice.say(room, f"{word} please"), loop).result(60)

    words, _ = await asyncio.to_thread(walk, gateway, config, steps, say, daemons)
    last = gateway("run", "--config", str(config))
    daemons.append(last)
    await alice.say(room, "FAULTLAST please")
    for word in [*words, "FAULTLAST"]:
        await alice.wait_for(room, bot_text(bot.user_id, rf"Echo: .*{word} please"))
    history = await alice.history(room)
    for word in [*words, "FAULTLAST"]:
        echoes = [e for e in history if bot_text(bot.user_id, rf"Echo: .*{word} please")(e)]
        assert len(echoes) == 1, f"{word}: answered {len(echoes)} times"


# ----- Slack --------------------------------------------------------------------------

SLACK_ALICE, SLACK_DM = "U0ALICE", "D0ALICE"


def test_slack_answers_each_message_once_through_every_kill_point(
    gateway,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    fake_slack: FakeSlack,
    daemons: list[GatewayProcess],
) -> None:
    fake_slack.add_user(SLACK_ALICE, "Alice")
    fake_slack.add_channel(SLACK_DM, im_with=SLACK_ALICE)
    settings = {
        "bot_token": BOT_TOKEN,
        "app_token": APP_TOKEN,
        "team_ids": [TEAM],
        "allowed_users": [SLACK_ALICE],
        "api_base_url": fake_slack.base_url,
        "reconnect_max_delay_seconds": 1.0,
    }
    config = write_config(
        tmp_path, target_repo, fake_api, channels={"console": None, "slack": settings},
        **fast_agent_sections(tmp_path),
    )  # fmt: skip
    steps = [
        Step("received", fresh=True),
        Step("stored"),
        Step("slack_acking"),
        Step("slack_acked"),
        Step("acknowledged", fresh=True),
        Step("executing"),
        Step("agent_running"),
        Step("slack_post_intended"),
        Step("slack_posted"),
        Step("reply_sent"),
    ]

    def say(word: str) -> None:
        fake_slack.user_says(SLACK_ALICE, SLACK_DM, f"{word} please")

    words, _ = walk(gateway, config, steps, say, daemons)
    daemons.append(gateway("run", "--config", str(config)))
    say("FAULTLAST")

    def posts_of(word: str) -> list[str]:
        texts = [str(args.get("text", "")) for args in fake_slack.calls_to("chat.postMessage")]
        return [t for t in texts if f"Echo: {word} please" in t]

    for word in [*words, "FAULTLAST"]:
        wait_until(lambda w=word: posts_of(w), f"the answer to {word}")  # type: ignore[misc]
    fake_slack.wait_until(
        lambda: not fake_slack.pending, what="every envelope acknowledged", timeout=60
    )
    for word in [*words, "FAULTLAST"]:
        assert len(posts_of(word)) == 1, f"{word}: answered {len(posts_of(word))} times"


# ----- email --------------------------------------------------------------------------


def test_email_answers_each_mail_once_through_every_kill_point(
    gateway,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    dovecot: Dovecot,
    smtp_catcher: SmtpCatcher,
    mailbox: str,
    daemons: list[GatewayProcess],
) -> None:
    """``email_smtp_accepted`` is the window the channel chose to close at most once (the
    server may have the mail): the reply must still arrive once, not twice.

    A daemon dies at its point while an earlier mail's reply may still be on its way out
    (the first mail's reply is often sent during the later steps). Killed before the
    reply's data ended, the next daemon sends it again; killed in the moment between the
    record that the whole mail is with the server and its end-of-data line, the channel
    gives it up (it cannot know whether the server took it; README, email). That one loss
    is accepted only as such: the server got all of that reply but its end, and a later
    daemon said it was not sent again."""
    config = email_config(
        tmp_path, target_repo, fake_api, dovecot, smtp_catcher, mailbox, acknowledge=True,
        sections=fast_agent_sections(tmp_path),
    )  # fmt: skip
    steps = [
        Step("received", fresh=True),
        Step("stored"),
        Step("email_source_removed"),
        Step("acknowledged", fresh=True),
        Step("executing"),
        Step("agent_running"),
        Step("reply_stored"),
        Step("reply_sending"),
        Step("email_smtp_accepted"),
        Step("reply_sent"),
    ]

    def say(word: str) -> None:
        dovecot.deliver(mailbox, mail(word, f"{word} please", to=mailbox))

    words, _ = walk(gateway, config, steps, say, daemons)
    daemons.append(gateway("run", "--config", str(config)))
    say("FAULTLAST")

    def answers(word: str) -> list[str]:
        texts = [text_of(m) for m in smtp_catcher.to(MAIL_ALICE)]
        return [t for t in texts if f"Echo: {word} please" in t]

    def given_up_at_its_end(word: str) -> bool:
        """All of the word's reply but its end reached the server, and a daemon gave it up."""
        logs = "".join(d.stderr for d in daemons)
        cut = [
            email.message_from_bytes(data, policy=email.policy.default)
            for data in list(smtp_catcher.cut_off)
        ]
        return any(
            f"Echo: {word} please" in _plain_text(m)
            and f"({m['Message-ID']}) was being sent when the daemon stopped" in logs
            for m in cut
        )

    for word in [*words, "FAULTLAST"]:
        wait_until(
            lambda w=word: answers(w) or given_up_at_its_end(w),  # type: ignore[misc]
            f"the answer to {word}",
        )
    wait_until(lambda: dovecot.folder_uids(mailbox) == [], "an empty inbox")
    for word in [*words, "FAULTLAST"]:
        if not answers(word) and given_up_at_its_end(word):
            print(f"{word}: its reply was cut off just before its end and given up (at most once)")
            continue
        assert len(answers(word)) == 1, f"{word}: answered {len(answers(word))} times"


def _plain_text(message: EmailMessage) -> str:
    """The plain text of a mail that may have been cut off anywhere ("" if none is left)."""
    try:
        part = message.get_body(preferencelist=("plain",))
        return str(part.get_content()) if part is not None else ""
    except Exception:  # a part cut off mid-way may not decode
        return ""


def test_an_unknown_fault_point_stops_the_start() -> None:
    """A typo in a test's point must not pass as a walk that never crashed: the daemon's
    constructor calls this first (in process: a daemon start costs seconds)."""
    with pytest.raises(ValueError, match="is no fault point") as refused:
        check_fault_point({FAULT_POINT_ENV: "recieved"})
    assert "received" in str(refused.value), "the known names are listed"
    assert check_fault_point({}) is None
