"""The Slack channel's pure rules: which events engage, how Slack markup reads, how a reply
looks in mrkdwn and splits below Slack's limits, what the progress message and cards show."""

from __future__ import annotations

from gateway_bot.channels.slack import events, render
from gateway_bot.channels.slack.access import SlackUser, refusal
from gateway_bot.config.channels import SlackChannelSettings
from gateway_bot.domain.messages import Button, Card, Reply, Usage

BOT = "U0BOT"


def message(**fields: object) -> dict[str, object]:
    return {"type": "message", "channel": "C1", "user": "U1", "ts": "10.000001", **fields}


def submits(event: dict[str, object], *, in_thread: bool = False, listen_all: bool = False) -> bool:
    return events.should_submit(event, BOT, in_thread, listen_all=listen_all)


def test_in_a_channel_only_mentions_and_the_bots_threads_engage() -> None:
    assert submits(message(text=f"<@{BOT}> fix it"))
    assert submits({**message(text="fix it"), "type": "app_mention"})
    assert not submits(message(text="just chatting"))
    reply = message(text="more", thread_ts="9.000001")
    assert submits(reply, in_thread=True)
    assert not submits(reply, in_thread=False)
    assert submits(message(text="just chatting"), listen_all=True)


def test_every_dm_engages_but_edits_deletions_and_bots_never_do() -> None:
    assert submits(message(channel="D1", channel_type="im", text="hi"))
    mention = f"<@{BOT}> hi"
    assert not submits(message(text=mention, subtype="message_changed", hidden=True))
    assert not submits(message(text=mention, subtype="message_deleted"))
    assert not submits(message(text=mention, bot_id="B9"))
    assert not submits(message(text=mention, edited={"ts": "11.0"}))
    assert submits(message(text=mention, subtype="file_share"))


def test_one_post_has_one_message_id_and_a_thread_is_a_conversation() -> None:
    top = message(text=f"<@{BOT}> hi")
    assert events.message_id("T1", top) == events.message_id("T1", {**top, "type": "app_mention"})
    reply = message(ts="12.000001", thread_ts="10.000001")
    assert events.conversation_key("T1", top) == events.conversation_key("T1", reply)
    assert events.conversation_key("T1", top) == "T1:C1:10.000001"


def test_slack_markup_reads_as_plain_text() -> None:
    text = f"<@{BOT}>  see <https://x.test/a?b=1&amp;c=2|the docs> in <#C9|dev>, &lt;3 <!here>"
    plain = events.slack_text_to_plain(events.strip_bot_mention(text, BOT))
    assert plain == "see the docs (https://x.test/a?b=1&c=2) in #dev, <3 @here"
    pasted = f"<@{BOT}> run\n```\n  indented\n```"
    assert events.strip_bot_mention(pasted, BOT) == "run\n```\n  indented\n```"


def test_markdown_becomes_mrkdwn_with_code_and_specials_intact() -> None:
    text = render.to_mrkdwn("**bold**, *it*, 2 * 3 * 4, `a<b`, [link](https://x.test) & <tag>")
    assert text == ("*bold*, _it_, 2 * 3 * 4, `a&lt;b`, <https://x.test|link> &amp; &lt;tag&gt;")


def test_long_replies_split_below_the_limit_with_fences_balanced() -> None:
    code = "\n".join(f"line {n} " + "x" * 50 for n in range(200))
    reply = Reply(text=f"Intro\n\n```\n{code}\n```\n\nOutro", usage=Usage(0.5, 3, 12.0))
    parts = render.render_reply(reply, limit=1000)
    assert len(parts) > 5
    assert all(len(part) <= 1000 for part in parts)
    assert all(part.count("```") % 2 == 0 for part in parts), "every chunk closes its fence"
    assert parts[-1].endswith("_$0.5000 · 3 turns · 12.0 s_")
    assert "line 199" in "".join(parts)


def test_progress_shows_the_latest_steps_escaped() -> None:
    steps = tuple(f"Bash: step {n} <&>" for n in range(20))
    text = render.progress_text(steps, 7.4)
    assert text.startswith(":hourglass_flowing_sand: Working… 7 s")
    assert "_… 8 earlier steps_" in text
    assert "• Bash: step 19 &lt;&amp;&gt;" in text
    assert "step 7 " not in text
    done = render.done_text(Reply(text="ok"), steps[:2])
    assert done.startswith(":white_check_mark: Done · 2 steps")


def test_a_card_has_one_button_per_choice_and_loses_them_when_decided() -> None:
    card = Card(
        "Unknown sender",
        "Bob wrote *hi*",
        (Button("Allow", "approval:AB:allow", style="primary"), Button("Deny", "approval:AB:deny")),
    )
    blocks = render.card_blocks(card)
    assert blocks[0]["text"]["text"] == "*Unknown sender*\nBob wrote _hi_"
    buttons = blocks[1]["elements"]
    assert [b["action_id"] for b in buttons] == ["approval:AB:allow", "approval:AB:deny"]
    assert buttons[0]["style"] == "primary"
    assert "style" not in buttons[1]
    assert [b["type"] for b in render.card_blocks(card, with_buttons=False)] == ["section"]


def test_who_is_refused_outright() -> None:
    settings = SlackChannelSettings(bot_token="x", app_token="y", team_ids=["T1"])
    assert refusal(SlackUser("U1", "a", "T1"), settings) is None
    assert "another workspace" in str(refusal(SlackUser("U1", "a", "T2"), settings))
    assert "bots" in str(refusal(SlackUser("U1", "a", "T1", is_bot=True), settings))
    assert "deactivated" in str(refusal(SlackUser("U1", "a", "T1", deleted=True), settings))
    guest = SlackUser("U1", "a", "T1", is_guest=True)
    assert "guest" in str(refusal(guest, settings))
    assert refusal(guest, settings.model_copy(update={"allow_guests": True})) is None
