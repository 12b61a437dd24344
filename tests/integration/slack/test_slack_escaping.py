"""Attacks on Slack's markup: agent output, what people typed, their display names and file
names must reach a thread as text, never as a live ``<!channel>``, ``<!here>``,
``<!subteam^…>`` or ``<@U…>`` that notifies a whole channel or a person; and the bot token
goes only to Slack's own file hosts, never to the address an external file names.

Slack sends what a person typed escaped (``&lt;!here&gt;``), so an attacker types the
mention as text, the channel unescapes it for the agent, and the agent echoes it back."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gateway_bot.channels.slack import render
from gateway_bot.domain.messages import Button, Card
from tests.conftest import write_config
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import APP_TOKEN, BOT_TOKEN, BOT_USER, TEAM, FakeSlack

ALICE, EVE = "U0ALICE", "U0EVE"
GENERAL, APPROVALS = "C0GENERAL", "C0APPROVALS"
MENTION = f"<@{BOT_USER}>"
LIVE = re.compile(r"<[!@#]")
"""What Slack turns into a broadcast, a user or group mention, or a channel link."""


# -- the converter, attack by attack -----------------------------------------------------


@pytest.mark.parametrize(
    ("markdown", "shown"),
    [
        ("tell <!channel> and <@U0BOB>", "tell &lt;!channel&gt; and &lt;@U0BOB&gt;"),
        ("<!subteam^S0DEVS> ping", "&lt;!subteam^S0DEVS&gt; ping"),
        ("<!subteam^S0DEVS|@devs> ping", "|!subteam^S0DEVS|@devs> ping"),  # a mailto link
        ("&lt;!here&gt; as an entity", "&lt;!here&gt; as an entity"),
        ("[click](!here)", "click (!here)"),
        ("[you](@U0BOB)", "you (@U0BOB)"),
        ("[<!here>](https://example.test)", "<https://example.test|&lt;!here&gt;>"),
        (
            "![<!channel>](https://example.test/p.png)",
            "<https://example.test/p.png|&lt;!channel&gt;>",
        ),
        ("`<!here>`\n\n```\n<!channel>\n```", "`&lt;!here&gt;`\n\n```\n&lt;!channel&gt;\n```"),
        ("# <!here>", "*&lt;!here&gt;*"),
        ("> <!here>", "> &lt;!here&gt;"),
    ],
)
def test_the_converter_lets_no_mention_through(markdown: str, shown: str) -> None:
    converted = render.to_mrkdwn(markdown)
    assert not LIVE.search(converted), converted
    assert shown in converted


def test_links_keep_working_and_stay_within_their_brackets() -> None:
    text = render.to_mrkdwn("[docs](https://example.test/a|b>c?x=1&y=2) and <https://x.test>")
    assert text == (
        "<https://example.test/a%7Cb%3Ec?x=1&amp;y=2|docs> and <https://x.test|https://x.test>"
    )


def test_a_card_shows_a_display_name_and_quoted_text_as_text() -> None:
    card = Card(
        title="Unknown sender in <!channel>",
        body="<!channel> (U0EVE) wrote:\n> hi <!here> <@U0ALICE>",
        buttons=(Button("Allow", "approval:x:allow", emoji="✅"),),
    )
    shown = [render.card_fallback(card), render.card_blocks(card)[0]["text"]["text"]]
    for text in shown:
        assert not LIVE.search(text), text
        assert "&lt;!here&gt;" in text
        assert "&lt;!channel&gt;" in text


# -- the real daemon against the fake Slack ---------------------------------------------


def slack_config(
    tmp_path: Path, repo: Path, api: FakeAnthropic, fake: FakeSlack, **sections: Any
) -> Path:
    settings = {
        "bot_token": BOT_TOKEN,
        "app_token": APP_TOKEN,
        "team_ids": [TEAM],
        "allowed_users": [ALICE],
        "api_base_url": fake.base_url,
        "reconnect_max_delay_seconds": 1.0,
    }
    channels = {"console": None, "slack": settings}
    return write_config(
        tmp_path, repo, api, sandbox={"kind": "none"}, channels=channels, **sections
    )


def start(gateway: Any, fake: FakeSlack, config: Path) -> Any:
    fake.add_user(ALICE, "Alice")
    fake.add_channel(GENERAL, "general")
    fake.add_channel(APPROVALS, "approvals")
    daemon = gateway("run", "--config", str(config))
    fake.wait_connected()
    return daemon


def everything_posted(fake: FakeSlack, channel: str) -> list[str]:
    """Every text the bot put in the channel: messages, their earlier versions, blocks."""
    shown: list[str] = []
    with fake._lock:
        posts = [dict(m) for m in fake.messages.get(channel, []) if m.get("user") == BOT_USER]
    for post in posts:
        for version in [*post.get("history", []), post]:
            shown.append(str(version.get("text") or ""))
            for block in version.get("blocks") or []:
                shown.append(str((block.get("text") or {}).get("text") or ""))
    return shown


def done(fake: FakeSlack, ts: str) -> bool:
    return any("Done" in m["text"] for m in fake.bot_posts(GENERAL, ts))


def test_an_agent_reply_and_its_steps_mention_nobody(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    start(gateway, fake_slack, slack_config(tmp_path, target_repo, fake_api, fake_slack))

    ts = fake_slack.user_says(
        ALICE,
        GENERAL,
        f"{MENTION} RUN_BASH echo '&lt;!here&gt;'\n"
        "tell &lt;!channel&gt; &lt;@U0BOB&gt; &lt;!subteam^S0DEVS&gt; [go](!here) "
        "&amp;lt;!here&amp;gt;",
    )

    reply = fake_slack.wait_for_reply(GENERAL, ts, "Echo:")["text"]
    fake_slack.wait_until(lambda: done(fake_slack, ts), what="the progress closed")
    for needle in ("&lt;!channel&gt;", "&lt;@U0BOB&gt;", "&lt;!subteam^S0DEVS&gt;", "go (!here)"):
        assert needle in reply, reply
    shown = everything_posted(fake_slack, GENERAL)
    assert any("echo '&lt;!here&gt;'" in text for text in shown), "the step shows, as text"
    live = [text for text in shown if LIVE.search(text)]
    assert not live, live


def test_a_strangers_card_and_name_mention_nobody(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, fake_slack: FakeSlack
) -> None:
    access = {
        "owners": {"slack": [ALICE]},
        "approval_destination": {"channel": "slack", "context": {"channel": APPROVALS}},
    }
    config = slack_config(tmp_path, target_repo, fake_api, fake_slack, access=access)
    fake_slack.add_user(EVE, "<!channel>")
    start(gateway, fake_slack, config)

    ts = fake_slack.user_says(EVE, GENERAL, f"{MENTION} hi &lt;!here&gt; &lt;@{ALICE}&gt;")
    card = fake_slack.wait_until(
        lambda: next(iter(fake_slack.messages[APPROVALS]), None), what="an approval card"
    )
    shown = [card["text"], card["blocks"][0]["text"]["text"]]
    for text in shown:
        assert "&lt;!channel&gt;" in text, "the display name is there, as text"
        assert "&lt;!here&gt;" in text, "the quoted message is there, as text"
        assert not LIVE.search(text), text

    allow = next(
        e["action_id"] for e in card["blocks"][1]["elements"] if e["action_id"].endswith("allow")
    )
    fake_slack.click(ALICE, APPROVALS, card["ts"], allow)
    reply = fake_slack.wait_for_reply(GENERAL, ts, "Echo:")["text"]
    assert "&lt;!here&gt;" in reply
    fake_slack.wait_until(lambda: done(fake_slack, ts), what="the progress closed")
    live = [
        t for c in (GENERAL, APPROVALS) for t in everything_posted(fake_slack, c) if LIVE.search(t)
    ]
    assert not live, live


class _Recorder(BaseHTTPRequestHandler):
    """A web server outside Slack that notes every request it gets."""

    seen: list[dict[str, str]]

    def do_GET(self) -> None:
        self.seen.append({"path": self.path, **dict(self.headers.items())})
        body = b"outside Slack"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def outside() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """(base URL, requests seen) of a server on 127.0.0.1 that is not the fake Slack."""
    seen: list[dict[str, str]] = []
    handler = type("Recorder", (_Recorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_an_external_files_link_never_gets_the_bot_token(
    gateway,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    fake_slack: FakeSlack,
    outside: tuple[str, list[dict[str, str]]],
) -> None:
    elsewhere, seen = outside
    start(gateway, fake_slack, slack_config(tmp_path, target_repo, fake_api, fake_slack))

    ts = fake_slack.user_says(
        ALICE,
        GENERAL,
        f"{MENTION} read these",
        files=[("notes.txt", b"kept in Slack")],
        remote_files=[
            ("<!here>.txt", f"{elsewhere}/steal/here.txt"),
            ("moved.txt", fake_slack.redirect_url(f"{elsewhere}/steal/moved.txt")),
        ],
    )

    fake_slack.wait_for_reply(GENERAL, ts, "Echo: read these")
    leaked = [r for r in seen if "Authorization" in r]
    assert not leaked, f"the bot token went outside Slack: {leaked}"
    assert seen == [], "the host fetched an address an external file named"
    notice = fake_slack.wait_for_reply(GENERAL, ts, ":paperclip:")["text"]
    assert "&lt;!here&gt;.txt" in notice, notice
    assert "outside Slack" in notice, notice
    assert "moved.txt" in notice, notice
    assert not LIVE.search(notice), notice
    prompt = " ".join(fake_api.user_texts(fake_api.requests[0]))
    assert "inbox/notes.txt" in prompt, "a file stored in Slack still arrives"
