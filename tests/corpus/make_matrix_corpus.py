"""Writes the starting Matrix cases of the bad-input corpus (``tests/corpus/matrix/``).

Run once (``uv run python -m tests.corpus.make_matrix_corpus``); it writes only the names
it makes. Each file is one event a room member sends through the real homeserver, as JSON:
``{"sender": "alice" | "mallory", "type": ..., "content": {...}}``. Alice is allowed;
Mallory is a member of the same room who is not. Synapse takes any JSON as content, so
every shape here is one a real client can send. Bodies carry ``CORPUS <case name>`` so the
test can tell what reached the agent. Names say what a user must see:

- ``answer--*``: odd but honest (Alice, a text message, a file that cannot be fetched:
  the agent is told it did not come): answered once;
- ``notice--*``: the sender is told what was wrong (a file that can never be fetched);
- ``refuse--*``: nothing runs and nothing is said about it (a stranger, an edit, a notice,
  a malformed message, a reaction or card click nobody may make).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent / "matrix"
MESSAGE = "m.room.message"


def _text(name: str, **extra: Any) -> dict[str, Any]:
    return {"msgtype": "m.text", "body": f"CORPUS {name}", **extra}


def cases() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}

    def add(
        kind: str, name: str, content: Any, sender: str = "alice", type_: str = MESSAGE
    ) -> None:
        found[f"{kind}--{name}.json"] = {"sender": sender, "type": type_, "content": content}

    # a stranger in the room, whatever they send
    stranger = "mallory"
    add("refuse", "stranger-text", _text("stranger-text"), stranger)
    add("refuse", "stranger-command", {"msgtype": "m.text", "body": "!stop CORPUS"}, stranger)
    add("refuse", "stranger-huge", _text("stranger-huge " + "x" * 50_000), stranger)
    add("refuse", "stranger-emote", {"msgtype": "m.emote", "body": "CORPUS emote"}, stranger)
    add(
        "refuse",
        "stranger-file",
        {"msgtype": "m.file", "body": "CORPUS f", "url": "mxc://x/y"},
        stranger,
    )
    add("refuse", "stranger-rtl-name", _text("stranger-rtl \u202e"), stranger)
    reply = {"m.relates_to": {"m.in_reply_to": {"event_id": "$whatever"}}}
    add("refuse", "stranger-reply", _text("stranger-reply", **reply), stranger)
    add("refuse", "stranger-at-room", _text("stranger-at-room @room"), stranger)
    # Synapse itself refuses m.room.message content without a string body and msgtype,
    # empty content, a thread or m.mentions of the wrong shape, an edit of nothing and an
    # over-long reaction key, a reaction to an event that does not exist (M_BAD_JSON /
    # M_UNKNOWN): no client gets those to the bot.
    add("refuse", "notice", {"msgtype": "m.notice", "body": "CORPUS notice"})
    add("refuse", "forged-card-event", {"CORPUS": "forged-card"}, type_="org.gateway_bot.card")
    add("refuse", "reaction-relates-to-a-string", {"m.relates_to": "CORPUS"}, type_="m.reaction")
    add("refuse", "custom-event-type", {"body": "CORPUS custom"}, type_="com.example.x")
    add("refuse", "sticker", {"body": "CORPUS sticker", "url": "mxc://x/y"}, type_="m.sticker")
    add("refuse", "poll-start", {"body": "CORPUS poll"}, type_="org.matrix.msc3381.poll.start")
    add("refuse", "call-invite", {"call_id": "CORPUS", "version": 0}, type_="m.call.invite")
    add("refuse", "redaction-of-nothing", {"redacts": "$x"}, type_="com.example.redaction")
    add("refuse", "reaction-unknown-key", {"m.relates_to": {"rel_type": "x"}}, type_="m.reaction")
    metadata = "http://169.254.169.254/latest/meta-data/"
    add(
        "notice",
        "file-url-not-mxc",
        {"msgtype": "m.file", "body": "CORPUS file-url-not-mxc", "url": metadata},
    )
    add(
        "notice",
        "file-url-traversal",
        {"msgtype": "m.file", "body": "CORPUS file-url-traversal", "url": "mxc://../../etc"},
    )
    add("answer", "file-url-missing", {"msgtype": "m.file", "body": "CORPUS file-url-missing"})
    add(
        "answer",
        "image-url-is-a-number",
        {"msgtype": "m.image", "body": "CORPUS image-url-is-a-number", "url": 5},
    )
    # odd but honest text from Alice: answered
    add("answer", "rtl-override", _text("rtl-override \u202etxt.exe\u202c"))
    add("answer", "zero-width", _text("zero-width \u200b\u200c\u200d\ufeff"))
    add("answer", "combining-marks", _text("combining-marks " + "e\u0301\u0336" * 300))
    add("answer", "emoji", _text("emoji \U0001f468\u200d\U0001f469\u200d\U0001f467"))
    add("answer", "at-room", _text("at-room @room please"))
    script = "<script>alert(1)</script><img src=x onerror=alert(1)>CORPUS html"
    html = {"format": "org.matrix.custom.html", "formatted_body": script}
    add("answer", "html-injection", _text("html-injection", **html))
    number = {"format": "org.matrix.custom.html", "formatted_body": 3}
    add("answer", "formatted-body-is-a-number", _text("formatted-body-is-a-number", **number))
    add("answer", "unknown-format", _text("unknown-format", format="x", formatted_body="y"))
    add("answer", "long-body", _text("long-body " + "word " * 10_000))
    add("answer", "many-lines", _text("many-lines" + "\n" * 3000 + "end"))
    add("answer", "markdown-bomb", _text("markdown-bomb " + "[" * 5000 + "](" * 5000))
    add("answer", "markdown-javascript-link", _text("markdown-javascript-link [x](javascript:x)"))
    add("answer", "html-tags-in-body", _text("html-tags-in-body <b>bold</b> <!-- c -->"))
    add("answer", "relates-to-garbage", _text("relates-to-garbage", **{"m.relates_to": []}))
    nowhere = {"m.relates_to": {"m.in_reply_to": {"event_id": "$does-not-exist"}}}
    add("answer", "reply-to-nothing", _text("reply-to-nothing", **nowhere))
    odd_reply = {"m.relates_to": {"m.in_reply_to": {"event_id": 5}}}
    add("answer", "reply-to-a-number", _text("reply-to-a-number", **odd_reply))
    add(
        "answer",
        "fallback-quote",
        {"msgtype": "m.text", "body": "> <@x:y> old\n\nCORPUS fallback-quote"},
    )
    add("answer", "nul-in-body", _text("nul-in-body \u0000 after"))
    add("answer", "emote", {"msgtype": "m.emote", "body": "CORPUS emote"})
    add(
        "answer",
        "unknown-msgtype",
        {"msgtype": "com.example.odd", "body": "CORPUS unknown-msgtype"},
    )
    return found


def main() -> None:
    HERE.mkdir(exist_ok=True)
    made = cases()
    for name, case in made.items():
        (HERE / name).write_text(json.dumps(case, indent=1) + "\n")
    print(f"{len(made)} cases in {HERE}")


if __name__ == "__main__":
    main()
