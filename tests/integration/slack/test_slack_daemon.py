"""People on Slack talk to the real daemon (real Claude Code CLI, fake model API) through a
fake Slack: threaded replies with live progress, DMs, workspace and signature checks,
approval buttons, a dropped websocket, a crash inside a post, files in and out."""

from __future__ import annotations

import re
import socket
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write_config
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import (
    APP_TOKEN,
    BOT_TOKEN,
    BOT_USER,
    OTHER_TEAM,
    SIGNING_SECRET,
    TEAM,
    FakeSlack,
    file_content,
)

ALICE, BOB, CAROL, MALLORY, GUEST = "U0ALICE", "U0BOB", "U0CAROL", "U0MALLORY", "U0GUEST"
GENERAL, APPROVALS, DM = "C0GENERAL", "C0APPROVALS", "D0ALICE"
MENTION = f"<@{BOT_USER}>"
USAGE = re.compile(r"_\$\d+\.\d{4} · 2 turns · \d+\.\d s_$")


def people(fake: FakeSlack) -> None:
    fake.add_user(ALICE, "Alice")
    fake.add_user(BOB, "Bob")
    fake.add_user(CAROL, "Carol")
    fake.add_user(MALLORY, "Mallory", team=OTHER_TEAM)
    fake.add_user(GUEST, "Guest", guest=True)
    fake.add_channel(GENERAL, "general")
    fake.add_channel(APPROVALS, "approvals")
    fake.add_channel(DM, im_with=ALICE)


def slack_config(
    tmp_path: Path, repo: Path, api: FakeAnthropic, fake: FakeSlack, **slack: Any
) -> Path:
    access = slack.pop("access", None)
    settings = {
        "bot_token": BOT_TOKEN,
        "app_token": APP_TOKEN,
        "team_ids": [TEAM],
        "allowed_users": [ALICE],
        "api_base_url": fake.base_url,
        "reconnect_max_delay_seconds": 1.0,
        **slack,
    }
    extra = {"access": access} if access else {}
    channels = {"console": None, "slack": settings}
    return write_config(tmp_path, repo, api, sandbox={"kind": "none"}, channels=channels, **extra)


_started: list[Any] = []


@pytest.fixture(autouse=True)
def _daemon_logs() -> Iterator[None]:
    """A failing test shows what the daemons logged."""
    _started.clear()
    yield
    for daemon in _started:
        print(f"--- daemon stderr ---\n{daemon.stderr}")


def start_daemon(gateway: Any, config: Path) -> Any:
    daemon = gateway("run", "--config", str(config))
    _started.append(daemon)
    return daemon


def start_socket_daemon(gateway: Any, fake: FakeSlack, config: Path, hellos: int = 1) -> Any:
    daemon = start_daemon(gateway, config)
    fake.wait_connected(hellos)
    return daemon


def test_mention_gets_a_threaded_reply_with_progress_edits(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    people(fake_slack)
    start_socket_daemon(
        gateway, fake_slack, slack_config(tmp_path, target_repo, fake_api, fake_slack)
    )

    ts = fake_slack.user_says(ALICE, GENERAL, f"{MENTION} please say hello")

    reply = fake_slack.wait_for_reply(GENERAL, ts, "Echo: please say hello")
    assert reply["thread_ts"] == ts, "the reply goes into the message's thread"
    assert USAGE.search(reply["text"]), reply["text"]
    ack = fake_slack.wait_until(
        lambda: next((m for m in fake_slack.bot_posts(GENERAL, ts) if "Done" in m["text"]), None),
        what="the acknowledgement closed as Done",
    )
    shown = [version["text"] for version in ack["history"]] + [ack["text"]]
    assert shown[0].endswith("Working on it…")
    assert any("Bash: echo tool-ran" in text for text in shown[1:-1]), shown
    assert "• Bash: echo tool-ran" in ack["text"]
    posts = fake_slack.bot_posts(GENERAL, ts)
    assert [m["ts"] for m in posts] == [ack["ts"], reply["ts"]], "one ack, one reply"
    assert all(m.get("thread_ts") == ts for m in posts)
    # Each post's intent was written by this process (during the flush, for the ack): no
    # post had to look for itself in the thread first.
    assert not fake_slack.calls_to("conversations.replies")


def test_a_direct_message_needs_no_mention(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    people(fake_slack)
    start_socket_daemon(
        gateway, fake_slack, slack_config(tmp_path, target_repo, fake_api, fake_slack)
    )

    ts = fake_slack.user_says(ALICE, DM, "hello in private")
    reply = fake_slack.wait_for_reply(DM, ts, "Echo: hello in private")
    assert reply["thread_ts"] == ts

    follow_up = fake_slack.user_says(ALICE, DM, "and a follow-up", thread_ts=ts)
    fake_slack.wait_for_reply(DM, ts, "Echo: and a follow-up")
    history = " ".join(fake_api.user_texts(fake_api.requests[-1]))
    assert "hello in private" in history, "a thread is one conversation: the session resumed"
    assert follow_up


def test_only_people_of_the_workspace_run_tasks_and_each_message_once(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    people(fake_slack)
    start_socket_daemon(
        gateway, fake_slack, slack_config(tmp_path, target_repo, fake_api, fake_slack)
    )

    foreign = fake_slack.user_says(MALLORY, GENERAL, f"{MENTION} run this", team=OTHER_TEAM)
    visitor = fake_slack.user_says(MALLORY, GENERAL, f"{MENTION} and this")
    guest = fake_slack.user_says(GUEST, GENERAL, f"{MENTION} guest here")
    stranger = fake_slack.user_says(BOB, GENERAL, f"{MENTION} not on the list")
    ts, bodies = fake_slack.says(ALICE, GENERAL, f"{MENTION} counted once")
    for body in bodies + bodies:  # Slack retries a delivery it thinks was lost
        fake_slack.deliver(body, "socket")
    fake_slack.edits(GENERAL, ts, f"{MENTION} counted once, edited")

    fake_slack.wait_for_reply(GENERAL, ts, "Echo: counted once")
    done = f"{MENTION} last one"
    last = fake_slack.user_says(ALICE, GENERAL, done)
    fake_slack.wait_for_reply(GENERAL, last, "Echo: last one")
    # Authentication runs in arrival order: everything above was decided by now.
    for refused in (foreign, visitor, guest, stranger):
        assert fake_slack.bot_posts(GENERAL, refused) == []
    assert len([t for t in fake_slack.texts(GENERAL, ts) if "Echo:" in t]) == 1
    assert not any("edited" in " ".join(fake_api.user_texts(r)) for r in fake_api.requests)
    assert not fake_slack.pending, "every envelope was acknowledged"


def test_http_events_are_signed_fresh_and_counted_once(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    people(fake_slack)
    port = free_port()
    config = slack_config(
        tmp_path,
        target_repo,
        fake_api,
        fake_slack,
        transport="http",
        app_token=None,
        signing_secret=SIGNING_SECRET,
        http_port=port,
    )
    start_daemon(gateway, config)
    fake_slack.http_target = f"http://127.0.0.1:{port}/slack/events"
    wait_listening(fake_slack)

    forged, forged_bodies = fake_slack.says(ALICE, GENERAL, f"{MENTION} forged")
    assert fake_slack.post_signed(forged_bodies[0], secret="not-the-secret") == 401
    stale, stale_bodies = fake_slack.says(ALICE, GENERAL, f"{MENTION} replayed")
    old = int(time.time()) - 10 * 60
    assert fake_slack.post_signed(stale_bodies[0], timestamp=old) == 401

    ts, bodies = fake_slack.says(ALICE, GENERAL, f"{MENTION} over http")
    assert [fake_slack.post_signed(body) for body in bodies] == [200, 200]
    assert fake_slack.post_signed(bodies[0], retry=1) == 200
    fake_slack.wait_for_reply(GENERAL, ts, "Echo: over http")

    assert fake_slack.bot_posts(GENERAL, forged) == []
    assert fake_slack.bot_posts(GENERAL, stale) == []
    prompts = " ".join(" ".join(fake_api.user_texts(r)) for r in fake_api.requests)
    assert "forged" not in prompts
    assert "replayed" not in prompts
    assert len([t for t in fake_slack.texts(GENERAL, ts) if "Echo:" in t]) == 1


def test_approval_buttons_count_only_an_owners_click(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    people(fake_slack)
    access = {
        "owners": {"slack": [ALICE]},
        "approval_destination": {"channel": "slack", "context": {"channel": APPROVALS}},
    }
    config = slack_config(tmp_path, target_repo, fake_api, fake_slack, access=access)
    start_socket_daemon(gateway, fake_slack, config)

    ts = fake_slack.user_says(BOB, GENERAL, f"{MENTION} may I?")
    card = fake_slack.wait_until(
        lambda: next(iter(fake_slack.messages[APPROVALS]), None), what="an approval card"
    )
    assert "Unknown sender" in card["blocks"][0]["text"]["text"]
    allow = next(
        e["action_id"] for e in card["blocks"][1]["elements"] if e["action_id"].endswith("allow")
    )
    fake_slack.click(CAROL, APPROVALS, card["ts"], allow)  # not an owner
    fake_slack.click(MALLORY, APPROVALS, card["ts"], allow, team=OTHER_TEAM)  # not our workspace
    fake_slack.click(ALICE, APPROVALS, card["ts"], allow)

    fake_slack.wait_for_reply(GENERAL, ts, "Echo: may I?")
    decided = fake_slack.thread(APPROVALS, card["ts"])[0]
    assert len(decided["history"]) == 1, "only the owner's click changed the card"
    assert "Allowed by Alice" in decided["blocks"][0]["text"]["text"]
    assert all(b["type"] != "actions" for b in decided["blocks"]), "no buttons left"

    fake_slack.add_channel("C0RANDOM", "random")
    fake_slack.adds_bot(CAROL, "C0RANDOM")  # not an owner: the owner decides
    invite = fake_slack.wait_until(
        lambda: next((m for m in fake_slack.messages[APPROVALS] if m["ts"] != card["ts"]), None),
        what="a card about the new channel",
    )
    ignore = next(
        e["action_id"]
        for e in invite["blocks"][1]["elements"]
        if not e["action_id"].endswith("allow")
    )
    fake_slack.click(ALICE, APPROVALS, invite["ts"], ignore)
    fake_slack.wait_until(lambda: "C0RANDOM" not in fake_slack.bot_in, what="the bot leaving")


def test_a_dropped_websocket_reconnects_and_the_reply_arrives_once(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    people(fake_slack)
    sticky = {"rooms": [{"channel": "slack", "engage": "mention-sticky"}]}
    config = slack_config(tmp_path, target_repo, fake_api, fake_slack, access=sticky)
    start_socket_daemon(gateway, fake_slack, config)
    fake_api.hold("DROP")
    ts = fake_slack.user_says(ALICE, GENERAL, f"{MENTION} DROP the line")
    assert fake_api.wait_for_held(60)

    fake_slack.drop_sockets()
    during = fake_slack.user_says(ALICE, GENERAL, "said while offline", thread_ts=ts)
    fake_slack.wait_connected(2)
    fake_api.release()

    fake_slack.wait_for_reply(GENERAL, ts, "Echo: DROP the line")
    fake_slack.wait_for_reply(GENERAL, ts, "Echo: said while offline")
    echoes = [t for t in fake_slack.texts(GENERAL, ts) if "Echo: DROP" in t]
    assert len(echoes) == 1
    assert during


def test_a_restart_inside_the_reply_post_sends_no_duplicate(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    people(fake_slack)
    config = slack_config(tmp_path, target_repo, fake_api, fake_slack)
    first = start_socket_daemon(gateway, fake_slack, config)
    fake_slack.hold_post = "Echo: crash while posting"
    ts = fake_slack.user_says(ALICE, GENERAL, f"{MENTION} crash while posting")
    assert fake_slack.held.wait(90), "the reply was never posted"
    first.kill()  # Slack has the message; the daemon never heard back

    start_socket_daemon(gateway, fake_slack, config, hellos=2)
    fake_slack.wait_until(
        lambda: any("Done" in m["text"] for m in fake_slack.bot_posts(GENERAL, ts)),
        what="the restarted daemon finishing the delivery",
    )
    echoes = [t for t in fake_slack.texts(GENERAL, ts) if "Echo:" in t]
    assert len(echoes) == 1, echoes
    assert len(fake_api.requests) == 2, "the agent did not run again"


def test_a_file_in_and_a_file_out_each_once(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    people(fake_slack)
    start_socket_daemon(
        gateway, fake_slack, slack_config(tmp_path, target_repo, fake_api, fake_slack)
    )

    ts = fake_slack.user_says(
        ALICE,
        GENERAL,
        f"{MENTION} WRITE_FILE name=../outbox/result.txt text=hello-out",
        files=[("data.csv", b"a,b\n1,2\n")],
    )
    fake_slack.wait_for_reply(GENERAL, ts, "Echo:")
    shared = fake_slack.wait_until(
        lambda: [f for m in fake_slack.bot_posts(GENERAL, ts) for f in m.get("files") or []],
        what="the outbox file in the thread",
    )
    assert [f["name"] for f in shared] == ["result.txt"]
    assert file_content(fake_slack, shared[0]["id"]) == b"hello-out"
    inboxes = list((tmp_path / "state" / "conversations").glob("*/inbox/data.csv"))
    assert [p.read_bytes() for p in inboxes] == [b"a,b\n1,2\n"]
    assert "inbox/data.csv" in " ".join(fake_api.user_texts(fake_api.requests[0]))

    fake_slack.user_says(ALICE, GENERAL, f"{MENTION} anything else?", thread_ts=ts)
    fake_slack.wait_for_reply(GENERAL, ts, "Echo: anything else?")
    fake_slack.wait_until(
        lambda: sum("Done" in m["text"] for m in fake_slack.bot_posts(GENERAL, ts)) == 2,
        what="the second task closed",
    )
    files = [f for m in fake_slack.bot_posts(GENERAL, ts) for f in m.get("files") or []]
    assert len(files) == 1, "the outbox file is not uploaded again"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(fake: FakeSlack, timeout: float = 60) -> None:
    """Until the daemon's Events API answers (Slack's url_verification handshake)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            status = fake.post_signed({"type": "url_verification", "challenge": "c", "token": "t"})
        except (urllib.error.URLError, ConnectionError):
            status = 0
        if status == 200:
            return
        assert time.monotonic() < deadline, "the Events API never started listening"
        time.sleep(0.1)
