"""Writes the starting Slack cases of the bad-input corpus (``tests/corpus/slack/``).

Run once (``uv run python -m tests.corpus.make_slack_corpus``); it writes only the names
it makes. Each file is one HTTP request to the daemon's Events API, as JSON:
``{"signature": ..., "content_type": ..., "body": "<the raw body>"}``. ``signature`` is
``valid`` (signed with the app's secret, now) or one way of getting it wrong. Every event
in here would start a task if it were let through (a mention of the bot, or a click on a
card), and carries the word ``CORPUS`` plus its case name, so the test can tell that none
of them reached the agent or got a reply. Names say what a user must see:

- ``unsigned--*``: refused with 401 before anything is read;
- ``refuse--*``: signed, answered below 500 (Slack must not retry it forever), and nothing
  runs or is posted;
- ``answer--*``: odd but authentic (signed, from the allowed user): answered once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent / "slack"
TEAM, OTHER_TEAM, BOT_USER = "T0TEAM", "T0OTHER", "U0BOT"
ALICE, BOB, MALLORY, GUEST = "U0ALICE", "U0BOB", "U0MALLORY", "U0GUEST"
GENERAL = "C0GENERAL"
MENTION = f"<@{BOT_USER}>"


def _event(name: str, number: int, **fields: Any) -> dict[str, Any]:
    ts = f"1700000{number:03d}.000100"
    event: dict[str, Any] = {
        "type": "app_mention",
        "channel": GENERAL,
        "user": ALICE,
        "text": f"{MENTION} CORPUS {name}",
        "ts": ts,
        "event_ts": ts,
        "team": TEAM,
    }
    event.update(fields)
    return {k: v for k, v in event.items() if v is not None}


def _callback(event: dict[str, Any], number: int, team: str = TEAM, **fields: Any) -> str:
    body = {
        "token": "legacy-token",
        "team_id": team,
        "api_app_id": "A0APP",
        "event": event,
        "type": "event_callback",
        "event_id": f"EvCORPUS{number:04d}",
        "event_time": 1700000000,
        "authorizations": [{"team_id": team, "user_id": BOT_USER, "is_bot": True}],
    }
    body.update(fields)
    return json.dumps(body)


def _click(name: str, user: str, team: str, action_id: str) -> str:
    from urllib.parse import urlencode

    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": user, "team_id": team},
        "team": {"id": team},
        "container": {"type": "message", "message_ts": "1.000001", "channel_id": GENERAL},
        "channel": {"id": GENERAL},
        "message": {"ts": "1.000001", "text": f"CORPUS {name}"},
        "actions": [{"action_id": action_id, "value": action_id, "block_id": "gateway_bot_card"}],
        "trigger_id": "trig",
    }
    return urlencode({"payload": json.dumps(payload)})


def cases() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    number = 0

    def add(kind: str, name: str, body: str, signature: str = "valid", form: bool = False) -> None:
        nonlocal number
        number += 1
        found[f"{kind}--{name}.json"] = {
            "signature": signature,
            "content_type": "application/x-www-form-urlencoded" if form else "application/json",
            "body": body,  # sent as latin-1 bytes: every other character is escaped ASCII
        }

    def event(name: str, **fields: Any) -> str:
        return _callback(_event(name, number + 1, **fields), number + 1)

    for signature in (
        "wrong-secret",
        "missing-signature",
        "missing-timestamp",
        "stale-timestamp",
        "future-timestamp",
        "other-body",
        "v1-prefix",
        "empty-signature",
        "uppercase-hex",
        "truncated",
        "timestamp-not-a-number",
        "signature-of-empty-body",
    ):
        add("unsigned", signature, event(f"unsigned-{signature}"), signature)
    # events that must not run anything, signed correctly
    add("refuse", "other-team", _callback(_event("other-team", 99), 99, team=OTHER_TEAM))
    add("refuse", "user-of-other-team", event("user-of-other-team", user=MALLORY))
    add("refuse", "guest", event("guest", user=GUEST))
    add("refuse", "from-a-bot", event("from-a-bot", bot_id="B0OTHER"))
    add("refuse", "from-ourselves", event("from-ourselves", user=BOT_USER))
    add("refuse", "no-user", event("no-user", user=None))
    add("refuse", "user-is-an-object", event("user-is-an-object", user={"id": ALICE}))
    add("refuse", "user-unknown", event("user-unknown", user="U0NOBODY"))
    add("refuse", "text-is-a-number", event("text-is-a-number", text=12345))
    add("refuse", "text-is-a-list", event("text-is-a-list", text=[MENTION, "CORPUS"]))
    add("refuse", "no-channel", event("no-channel", channel=None))
    add("refuse", "channel-is-a-number", event("channel-is-a-number", channel=7))
    add("refuse", "no-ts", event("no-ts", ts=None, event_ts=None))
    add("refuse", "ts-is-garbage", event("ts-is-garbage", ts="../../etc", event_ts="x"))
    add("refuse", "edited", event("edited", type="message", subtype="message_changed"))
    add("refuse", "deleted", event("deleted", type="message", subtype="message_deleted"))
    add("refuse", "bot-message-subtype", event("bot-message-subtype", subtype="bot_message"))
    add("refuse", "channel-join", event("channel-join", type="message", subtype="channel_join"))
    add("refuse", "unknown-event-type", event("unknown-event-type", type="no_such_event"))
    add("refuse", "event-is-a-string", _callback("CORPUS event-is-a-string", 50))  # type: ignore[arg-type]
    add("refuse", "event-missing", json.dumps({"type": "event_callback", "team_id": TEAM}))
    add(
        "refuse",
        "unknown-callback-type",
        event("unknown-callback-type").replace(
            '"type": "event_callback"', '"type": "no_such_callback"'
        ),
    )
    add("refuse", "invalid-json", '{"type": "event_callback", "event": {CORPUS')
    add("refuse", "json-array", json.dumps(["CORPUS", "json-array"]))
    add("refuse", "json-string", json.dumps("CORPUS json-string"))
    add("refuse", "json-null", "null")
    add("refuse", "empty-body", "")
    add("refuse", "deeply-nested-json", "[" * 100_000 + "]" * 100_000)
    add("refuse", "nul-bytes", event("nul-bytes").replace("CORPUS", "CORPUS\\u0000"))
    add("refuse", "lone-surrogate", event("lone-surrogate").replace("CORPUS", "CORPUS\\ud800"))
    huge = f"{MENTION} CORPUS huge " + "x" * 500_000
    add("refuse", "huge-text-from-a-stranger", event("huge", user=BOB, text=huge))
    add("refuse", "not-utf8", event("not-utf8").replace("CORPUS", "CORPUS\xff\xfe"))
    add("refuse", "form-without-payload", "CORPUS=form-without-payload", form=True)
    add("refuse", "form-payload-invalid-json", "payload=%7BCORPUS", form=True)
    add("refuse", "form-payload-array", "payload=%5B%5D", form=True)
    for name, user, team, action in (
        ("click-forged-action-id", ALICE, TEAM, "gwb:approve:CORPUS:allow"),
        ("click-from-other-team", MALLORY, OTHER_TEAM, "gwb:approve:CORPUS1:allow"),
        ("click-by-a-stranger", BOB, TEAM, "gwb:approve:CORPUS2:allow"),
        ("click-unknown-action", ALICE, TEAM, "../../etc/passwd"),
        ("click-empty-action", ALICE, TEAM, ""),
    ):
        add("refuse", name, _click(name, user, team, action), form=True)
    add(
        "refuse",
        "unknown-interactive-type",
        "payload="
        + json.dumps({"type": "no_such_type", "user": {"id": ALICE}, "team": {"id": TEAM}}),
        form=True,
    )
    add(
        "refuse",
        "view-submission",
        "payload="
        + json.dumps(
            {"type": "view_submission", "user": {"id": ALICE}, "team": {"id": TEAM}, "view": {}}
        ),
        form=True,
    )
    add(
        "refuse",
        "shortcut-without-callback",
        "payload=" + json.dumps({"type": "shortcut", "user": {"id": ALICE}, "team": {"id": TEAM}}),
        form=True,
    )
    # signed by Slack's secret and from Alice: authentic, whatever the header says
    add("answer", "json-sent-as-form", event("json-sent-as-form"), form=True)
    for name, text in (
        ("rtl-override-name", "\u202e CORPUS rtl"),
        ("zero-width-mention", f"<@\u200b{BOT_USER}> CORPUS zw"),
        ("mention-of-someone-else", "<@U0SOMEONE> CORPUS else"),
        ("broadcast-only", "<!channel> CORPUS broadcast"),
        ("no-mention-in-a-channel", "CORPUS plain chatter"),
    ):
        add("refuse", name, event(name, type="message", text=text, channel_type="channel"))
    return found


def main() -> None:
    HERE.mkdir(exist_ok=True)
    made = cases()
    for name, case in made.items():
        (HERE / name).write_text(json.dumps(case, indent=1) + "\n")
    print(f"{len(made)} cases in {HERE}")


if __name__ == "__main__":
    main()
