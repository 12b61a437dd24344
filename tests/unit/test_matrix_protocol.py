"""The Matrix channel's pure logic, no server: who is allowed, who is joined as the sync
says, which timeline events are new, what a message says and where it belongs, how replies
are cut, which names are safe."""

from __future__ import annotations

from typing import Any

import pytest

from gateway_bot.channels.matrix.events import (
    CARD_KEY,
    EventKind,
    card_buttons,
    classify,
    conversation_of,
    invite_of,
    mentions_bot,
    new_timeline_events,
    parse_message,
    strip_leading_mention,
    strip_reply_fallback,
    user_allowed,
)
from gateway_bot.channels.matrix.members import RoomMembers
from gateway_bot.channels.matrix.render import finished_content, markdown_to_html, split_markdown
from gateway_bot.config.server import build_server_config, load_server_config
from gateway_bot.config.yaml_tags import ConfigError
from gateway_bot.core.workspaces.inbox_files import safe_filename
from gateway_bot.domain.messages import Reply, Usage
from tests.support.paths import EXAMPLES

BOT = "@gateway:example.org"


def message(body: str, **content: Any) -> dict[str, Any]:
    return {
        "type": "m.room.message",
        "event_id": f"$e-{body[:8]}",
        "sender": "@alice:example.org",
        "content": {"msgtype": "m.text", "body": body, **content},
    }


def join(user: str) -> dict[str, Any]:
    return {"type": "m.room.member", "state_key": user, "content": {"membership": "join"}}


@pytest.mark.parametrize(
    ("user", "allowed"),
    [
        ("@alice:example.org", True),
        ("@bob:example.org", True),
        ("@alice:evil.example", False),
        ("@eve:sub.example.org", False),
        ("@carol:other.org", True),
    ],
)
def test_allowed_users_are_exact_ids_or_whole_servers(user: str, allowed: bool) -> None:
    assert user_allowed(user, ["@*:example.org", "@carol:other.org"]) is allowed


def test_history_before_the_bot_joined_is_never_new() -> None:
    old, mine, new = message("old"), join(BOT), message("new")
    assert new_timeline_events([old, mine, new], BOT, joined_before=False) == [new]
    assert new_timeline_events([old, new], BOT, joined_before=False) == []
    assert new_timeline_events([old, new], BOT, joined_before=True) == [old, new]


def test_the_bot_ignores_itself_notices_and_edits() -> None:
    assert classify(message("hi"), BOT) is EventKind.MESSAGE
    assert classify({**message("hi"), "sender": BOT}, BOT) is EventKind.IGNORED
    assert classify(message("beep", msgtype="m.notice"), BOT) is EventKind.IGNORED
    edit = message("* fixed", **{"m.relates_to": {"rel_type": "m.replace", "event_id": "$x"}})
    assert classify(edit, BOT) is EventKind.IGNORED
    assert classify({**message("x"), "content": {}}, BOT) is EventKind.IGNORED  # redacted
    assert classify({"type": "m.room.encrypted", "sender": "@a:b"}, BOT) is EventKind.ENCRYPTED
    reaction = {
        "type": "m.reaction",
        "sender": "@a:b",
        "content": {"m.relates_to": {"rel_type": "m.annotation", "event_id": "$c", "key": "✅"}},
    }
    assert classify(reaction, BOT) is EventKind.REACTION


def test_a_file_with_a_caption_and_one_without() -> None:
    info = {"size": 12, "mimetype": "text/plain"}
    captioned = parse_message(
        message("look at this", msgtype="m.file", filename="a.txt", url="mxc://s/1", info=info)
    )
    assert captioned.body == "look at this"
    assert [(a.filename, a.size, a.source_ref) for a in captioned.attachments] == [
        ("a.txt", 12, "mxc://s/1")
    ]
    bare = parse_message(message("b.png", msgtype="m.image", url="mxc://s/2"))
    assert bare.body == ""
    assert bare.attachments[0].filename == "b.png"


def test_reply_fallbacks_are_stripped() -> None:
    quoted = "> <@bob:example.org> earlier words\n> more\n\nmy answer"
    assert strip_reply_fallback(quoted) == "my answer"
    assert strip_reply_fallback("> a quote I typed") == "> a quote I typed"
    reply = message(quoted, **{"m.relates_to": {"m.in_reply_to": {"event_id": "$p"}}})
    assert parse_message(reply).body == "my answer"


def test_threads_make_conversations_only_where_enabled() -> None:
    assert conversation_of("!r:s", "$m", None, threads=True) == ("!r:s|$m", "$m")
    assert conversation_of("!r:s", "$m", "$root", threads=True) == ("!r:s|$root", "$root")
    assert conversation_of("!r:s", "$m", None, threads=False) == ("!r:s", None)
    assert conversation_of("!r:s", "$m", "$root", threads=False) == ("!r:s", "$root")
    threaded = message("x", **{"m.relates_to": {"rel_type": "m.thread", "event_id": "$root"}})
    assert parse_message(threaded).thread_root == "$root"


def test_mentions_and_commands_after_a_mention() -> None:
    names = ("Gateway Bot", "gateway")
    assert mentions_bot({"m.mentions": {"user_ids": [BOT]}, "body": "x"}, BOT, names)
    assert mentions_bot({"body": "hey gateway, run it"}, BOT, names)
    assert not mentions_bot({"body": "the gateways are down"}, BOT, names)
    assert strip_leading_mention("gateway: /stop", BOT, names) == "/stop"
    assert strip_leading_mention(f"{BOT} !status", BOT, names) == "!status"
    assert strip_leading_mention("Gateway Bot, /new", BOT, names) == "/new"
    assert strip_leading_mention("please ask gateway", BOT, names) == "please ask gateway"


def test_invites_name_the_inviter() -> None:
    state = [
        {
            "type": "m.room.member",
            "state_key": "@alice:s",
            "sender": "@alice:s",
            "content": {"membership": "join"},
        },
        {
            "type": "m.room.member",
            "state_key": BOT,
            "sender": "@alice:s",
            "content": {"membership": "invite", "is_direct": True},
        },
    ]
    assert invite_of(state, BOT) == ("@alice:s", True)
    assert invite_of(state[:1], BOT) is None


def test_an_edited_card_shows_its_latest_buttons() -> None:
    buttons = [{"action_id": "a", "emoji": "✅", "label": "Allow"}]
    card = {"content": {CARD_KEY: {"buttons": buttons}}}
    assert card_buttons(card) == buttons
    edit = {"content": {"m.new_content": {CARD_KEY: {"buttons": []}}}}
    assert card_buttons({**card, "unsigned": {"m.relations": {"m.replace": edit}}}) == []


def test_a_strangers_edit_of_a_card_cannot_repoint_its_buttons() -> None:
    """The attack, for a homeserver that bundles any sender's edit (Synapse bundles only
    the sender's own): mallory "edits" the bot's card so that ✅ carries the action of
    another approval, and the owner's ✅ on the card would decide that one instead."""
    buttons = [{"action_id": "approval:aaaaaaaaaaaa:allow", "emoji": "✅", "label": "Allow"}]
    forged = [{"action_id": "approval:bbbbbbbbbbbb:allow", "emoji": "✅", "label": "Allow"}]
    card = {"sender": BOT, "content": {CARD_KEY: {"buttons": buttons}}}
    edit = {"sender": "@mallory:s", "content": {"m.new_content": {CARD_KEY: {"buttons": forged}}}}
    assert card_buttons({**card, "unsigned": {"m.relations": {"m.replace": edit}}}) == buttons
    own = {**edit, "sender": BOT}
    assert card_buttons({**card, "unsigned": {"m.relations": {"m.replace": own}}}) == forged


def test_mentions_or_a_msgtype_of_the_wrong_type_do_not_break_the_message() -> None:
    """Synapse refuses such ``m.mentions`` or ``msgtype`` in a plain event, but the content
    of an encrypted one is the sender's alone: a number there made the parse fail (the
    message went unanswered)."""
    for user_ids in (7, None, {"@bot:s": 1}, "@bot:s"):
        content = {"msgtype": "m.text", "body": "hi", "m.mentions": {"user_ids": user_ids}}
        assert not mentions_bot(content, "@bot:s", [])
    for msgtype in (["m.file"], {"m.file": 1}):
        content = {"msgtype": msgtype, "body": "hi", "url": "mxc://s/f"}
        assert parse_message({"content": content}).body == "hi"


def test_long_text_splits_on_lines_and_keeps_code_fences_balanced() -> None:
    code = "\n".join(f"x{n} = {n}" for n in range(300))
    text = f"intro\n\n```python\n{code}\n```\n\noutro"
    parts = split_markdown(text, 1000)
    assert len(parts) > 2
    assert all(len(p.encode()) <= 1000 for p in parts)
    for part in parts:
        assert part.count("```") % 2 == 0, part
        assert markdown_to_html(part).count("<pre>") == markdown_to_html(part).count("</pre>")
    assert parts[1].startswith("```python")
    lines = [line for p in parts for line in p.split("\n") if line.startswith("x")]
    assert lines == code.split("\n")


def test_one_huge_line_is_cut_too() -> None:
    parts = split_markdown("é" * 5000, 1000)
    assert all(len(p.encode()) <= 1000 for p in parts)
    assert "".join(parts) == "é" * 5000


def test_markdown_becomes_matrix_html_without_raw_html() -> None:
    rendered = markdown_to_html("**bold** <script>alert(1)</script>\n\n```sh\nls\n```")
    assert "<strong>bold</strong>" in rendered
    assert "<script>" not in rendered
    assert '<pre><code class="language-sh">ls\n</code></pre>' in rendered


@pytest.mark.parametrize(
    ("name", "safe"),
    [
        ("report.pdf", "report.pdf"),
        ("../../etc/passwd", "passwd"),
        ("C:\\Users\\me\\my file (1).txt", "my_file_1_.txt"),
        (".bashrc", "bashrc"),
        ("", "file"),
        ("..", "file"),
        ("a" * 300 + ".tar.gz", "a" * 97 + ".gz"),
    ],
)
def test_file_names_are_made_safe(name: str, safe: str) -> None:
    assert safe_filename(name) == safe


def test_the_example_config_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MATRIX_BOT_PASSWORD", "secret")
    config = load_server_config(EXAMPLES / "matrix.yaml")
    matrix = config.channels.matrix
    assert matrix is not None
    assert matrix.password == "secret"
    assert matrix.threads_in("!AbCdEfGhIjKlMnOp:example.org") is True
    assert matrix.threads_in("!other:example.org") is False


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"user_id": "gateway"}, "channels.matrix.user_id"),
        ({"password": None}, "exactly one of access_token and password"),
        ({"access_token": "t"}, "exactly one of access_token and password"),
        ({"allowed_users": ["alice"]}, "channels.matrix.allowed_users"),
        ({"homeserver": "matrix.example.org"}, "channels.matrix.homeserver"),
    ],
)
def test_config_mistakes_are_reported_with_their_key(
    settings: dict[str, Any], problem: str
) -> None:
    matrix = {
        "homeserver": "https://matrix.example.org",
        "user_id": "@gateway:example.org",
        "password": "pw",
        **settings,
    }
    with pytest.raises(ConfigError) as raised:
        build_server_config({"repo": {"url": "."}, "channels": {"matrix": matrix}}, "test")
    assert any(problem in line for line in raised.value.problems), raised.value.problems


def test_the_progress_display_ends_saying_how_the_task_ended() -> None:
    usage = Usage(cost_usd=0.01, num_turns=2, duration_s=1.23)
    assert finished_content(Reply("ok", usage=usage), 3)["body"] == "Done · 3 steps · 1.2 s"
    assert finished_content(Reply("boom", usage=usage, is_error=True), 1)["body"].startswith(
        "Failed · 1 step"
    )
    assert finished_content(Reply("Stopped. The task was cancelled."), None)["body"] == "Ended"


def _member(user: str, membership: str, **content: Any) -> dict[str, Any]:
    return {
        "type": "m.room.member",
        "state_key": user,
        "content": {"membership": membership, **content},
    }


def _sync(**rooms: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """A sync body: room id -> its timeline (no state block), ``left`` the rooms left."""
    left = rooms.pop("left", [])
    joined = {room: {"timeline": {"events": events}} for room, events in rooms.items()}
    return {"rooms": {"join": joined, "leave": {str(room): {} for room in left}}}


def test_the_sync_answers_membership_only_where_it_saw_the_whole_of_it() -> None:
    """The sync replaces a ``joined_members`` call per message only when it gave the room's
    whole membership; anywhere else the homeserver must be asked (None)."""
    alice, mallory = "@alice:example.org", "@mallory:example.org"
    members = RoomMembers()
    assert members.joined("!a") is None  # before the first sync (a task recovered at start)
    first = {
        "rooms": {
            "join": {
                "!a": {
                    "state": {"events": [_member(BOT, "join"), _member(alice, "join")]},
                    "timeline": {"events": [message("hi"), _member(mallory, "join")]},
                }
            }
        }
    }
    members.follow(first, full_state=True, known_rooms=[])
    assert members.joined("!a") == {BOT: BOT, alice: alice, mallory: mallory}

    # One batch: Mallory is kicked after speaking, Alice renames herself; in a room the
    # bot newly joined the batch is its full state; of a room it only hears deltas of (its
    # membership unknown here), nothing is answered.
    renamed = _member(alice, "join", displayname="A")
    delta = _sync(
        **{
            "!a": [message("x"), _member(mallory, "leave"), renamed],
            "!new": [_member(BOT, "join"), _member(mallory, "join")],
            "!old": [_member(alice, "join")],
        }
    )
    members.follow(delta, full_state=False, known_rooms=["!a", "!old"])
    assert members.joined("!a") == {BOT: BOT, alice: "A"}
    assert members.joined("!new") == {BOT: BOT, mallory: mallory}
    assert members.joined("!old") is None

    # A member event it cannot read, and a room the bot left: the homeserver answers.
    odd = {"type": "m.room.member", "state_key": mallory, "content": {"membership": 7}}
    members.follow(_sync(**{"!a": [odd]}, left=["!new"]), full_state=False, known_rooms=["!a"])
    assert members.joined("!a") is None
    assert members.joined("!new") is None
    # Another homeserver's unhashable membership: that room is unknown, the batch is read on
    # (it raised TypeError, and the listener fetched the same failing batch for ever).
    members.follow(first, full_state=True, known_rooms=[])
    listed = {"type": "m.room.member", "state_key": mallory, "content": {"membership": ["leave"]}}
    members.follow(
        _sync(**{"!a": [listed], "!new": [_member(BOT, "join")]}),
        full_state=False, known_rooms=["!a"],
    )  # fmt: skip
    assert members.joined("!a") is None
    assert members.joined("!new") == {BOT: BOT}

    # While syncs fail the state may be behind the homeserver's: nothing is answered.
    members.follow(first, full_state=True, known_rooms=[])
    members.lost()
    assert members.joined("!a") is None
    members.follow(_sync(), full_state=False, known_rooms=["!a"])
    assert members.joined("!a") == {BOT: BOT, alice: alice, mallory: mallory}
