"""Chat commands typed the way careless or hostile people type them: a schedule number too
big for the database, a digit from another script, a model "name" that is a CLI option,
and /status after /model while a session runs. Each gets an answer that says what happened,
and the conversation goes on."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway_bot.config.action_rules import ActionApprovalSettings
from gateway_bot.core.commands.effects import not_yours
from gateway_bot.domain.lifecycle import CompletionReason
from tests.core.conftest import World
from tests.core.fakes import BareChannel
from tests.core.test_action_approvals import ApprovalWorld
from tests.core.test_approvals import card_code
from tests.core.test_schedules import ScheduleWorld


@pytest.fixture
async def sworld(tmp_path: Path) -> AsyncIterator[ScheduleWorld]:
    made = ScheduleWorld(tmp_path)
    await made.start()
    yield made
    await made.close()


async def test_a_huge_schedule_number_is_answered_and_the_conversation_goes_on(
    sworld: ScheduleWorld,
) -> None:
    assert (await sworld.command("/schedule in 2 hours check CI")).startswith("Scheduled #1")
    # Used to reach SQLite as an integer it cannot hold: a traceback and no answer at all.
    for command in ("/unschedule", "/pause", "/resume"):
        answer = await sworld.command(f"{command} 99999999999999999999999999")
        assert answer == (
            "There is no schedule #9999999999999999999… in this conversation "
            "(/schedules lists them)."
        )
    # Past int()'s own digit limit too.
    assert (await sworld.command("/pause " + "9" * 5000)).startswith("There is no schedule #")
    assert await sworld.command("/pause 1") == "Paused schedule #1. /resume 1 to run it again."
    # Quoted, as /revoke's names may be; an open quote is one line.
    assert (await sworld.command('/resume "#1"')).startswith("Resumed schedule #1.")
    assert await sworld.command('/pause "1') == (
        '/pause: a quote is not closed: close it ("like this") or leave the quotes out. '
        "Nothing was done."
    )


async def test_digits_of_other_scripts_name_no_schedule(sworld: ScheduleWorld) -> None:
    await sworld.command("/schedule in 2 hours check CI")
    # An Arabic-Indic one and a superscript one count as digits for str.isdigit: they used
    # to pause #1.
    arabic_one, superscript_one = "\u0661", "\u00b9"
    for number in (arabic_one, superscript_one, "#" + arabic_one):
        assert await sworld.command(f"/pause {number}") == (
            "Which schedule? Give its number, as /schedules lists them."
        )
    assert "next " in await sworld.command("/schedules")  # still active, not paused


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    made = World(tmp_path)
    await made.start()
    yield made
    await made.close()


async def test_a_model_name_that_is_an_option_or_prose_is_refused(world: World) -> None:
    for name in ("--dangerously-skip-permissions", "-m", "opus; rm -rf /", "x" * 129, "ópus"):
        answer = (await world.reply(await world.say(f"/model {name}"))).text
        assert answer.startswith("Not a model name:"), (name, answer)
    conversation = await world.store.active_conversation("fake", "dm")
    assert conversation is not None
    assert conversation.next_model is None
    for name in ("claude-opus-4-1", "sonnet[1m]", "us.anthropic.claude-3-7-sonnet-v1:0"):
        assert (await world.reply(await world.say(f"/model {name}"))).text == (
            f"Model set to {name}."
        )


async def test_status_says_which_model_runs_and_which_comes_with_new(world: World) -> None:
    await world.reply(await world.say("hello"))
    conversation = await world.store.active_conversation("fake", "dm")
    assert conversation is not None
    # The agent's first run made a session with the default model.
    await world.store.update_conversation(conversation.id, agent_session_id="session-1")
    chosen = (await world.reply(await world.say("/model claude-opus-4-1"))).text
    assert chosen == "Model claude-opus-4-1 will be used from the next new session (/new)."
    status = (await world.reply(await world.say("/status"))).text
    # It used to say "(claude-opus-4-1)", though the session still runs the default.
    assert status.startswith(
        f"Conversation {conversation.id} (default model; claude-opus-4-1 from the next /new)."
    )
    usage = (await world.reply(await world.say("/model"))).text
    assert usage == (
        "Usage: /model NAME. This conversation uses default model; claude-opus-4-1 from the "
        "next /new."
    )


async def test_a_command_a_phone_capitalised_is_still_the_command(world: World) -> None:
    # A phone's keyboard writes "/Status": it used to go to the agent as a prompt.
    for typed in ("/Status", "!STATUS"):
        answer = (await world.reply(await world.say(typed))).text
        assert answer.startswith("Conversation "), (typed, answer)
    assert world.agent.bodies() == []
    # A capitalised word that is no command, or a sentence, stays text for the agent; a
    # lowercase unknown word is still an unknown command.
    for text in ("/Users", "!Help me with the tests", "/New idea: cache the build"):
        assert (await world.reply(await world.say(text))).text == f"Echo: {text}"
    unknown = (await world.reply(await world.say("/frobnicate"))).text
    assert unknown.startswith("Unknown command 'frobnicate'")


async def test_an_owner_may_add_a_reason_after_the_code_and_a_missing_code_gets_usage(
    world: World,
) -> None:
    held = await world.say("hello bot", sender="stranger")
    await world.until(lambda: world.channel.texts("owners", "card"), "the approval card")
    code = card_code(world)
    usage = await world.say("/deny", room="owners", sender="owner")
    assert (await world.reply(usage)).text == "Usage: /deny CODE (the code on the card)."
    # "/deny CODE REASON" as for the agent's actions: it used to look for an approval named
    # "CODE looks like spam" and deny nothing.
    denied = await world.say(f"/deny {code} looks like spam", room="owners", sender="owner")
    assert (await world.reply(denied)).text == "Denied Stranger in Room dm (dm) (1 held dropped)."
    assert (await world.settled(held)).completion_reason is CompletionReason.UNAUTHORIZED
    assert world.agent.runs == []


async def test_allow_with_a_stray_word_decides_nothing_and_always_in_capitals_counts(
    tmp_path: Path,
) -> None:
    world = ApprovalWorld(tmp_path, channel=BareChannel(), actions=ActionApprovalSettings())
    await world.start()
    try:
        asked = await world.say("ask:git_push")
        notice = await world.until(
            lambda: next((t for t in world.channel.texts("dm") if "asks to run" in t), None),
            "the text card",
        )
        code = re.findall(r"`!allow ([0-9a-f]{12})` to run it once", notice)[0]
        # It used to allow once: only "always" was read, anything else meant "once".
        assert await world.command(f"!allow {code} alwyas") == (
            f"Usage: /allow {code} (once) or /allow {code} always. Nothing was decided."
        )
        assert await world.command(f"!answer {code}") == (
            "Usage: /answer CODE TEXT (your answer in words)."
        )
        answer = await world.command(f"!allow {code} Always")
        assert answer == f"Allowed {code} (always in this conversation)."
        assert "[allowed: allowed by Alice]" in (await world.reply(asked)).text
    finally:
        await world.close()


async def test_a_quoted_name_is_one_person_and_an_open_quote_is_one_line(world: World) -> None:
    # A sender whose id has a space (a display-name-like id, as some channels give).
    held = await world.say("hello bot", sender="jane doe")
    await world.until(lambda: world.channel.texts("owners", "card"), "the approval card")
    await world.click(card_code(world), "allow")
    assert (await world.reply(held)).text == "Echo: hello bot"

    # An open quote is a clear line, not a traceback and not a revocation of "jane".
    typo = await world.say('/revoke "jane doe everywhere', room="owners", sender="owner")
    assert (await world.reply(typo)).text == (
        '/revoke: a quote is not closed: close it ("like this") or leave the quotes out. '
        "Nothing was done."
    )
    # It used to split into "jane" and "doe" (a user and a room): "no approval to revoke".
    revoke = await world.say('/revoke "jane doe" everywhere', room="owners", sender="owner")
    assert (await world.reply(revoke)).text == (
        "Revoked jane doe's approval in Room dm (dm). Their next message to the bot there "
        "goes to an owner for approval again."
    )
    again = await world.say("still here?", sender="jane doe")
    await world.until(lambda: len(world.channel.texts("owners", "card")) == 2, "a second card")
    assert world.agent.bodies() == ["hello bot"]
    assert (await world.task(again)).completion_reason is None  # held for an owner

    # The other commands that take a name read quotes the same way; a phone's curly ones too.
    model = await world.say("/model \u201cclaude-opus-4-1\u201d")
    assert (await world.reply(model)).text == "Model set to claude-opus-4-1."


async def test_free_text_after_a_code_keeps_its_apostrophes(tmp_path: Path) -> None:
    world = ApprovalWorld(tmp_path, channel=BareChannel(), actions=ActionApprovalSettings())
    await world.start()
    try:
        asked = await world.say("question:red|blue")
        notice = await world.until(
            lambda: next((t for t in world.channel.texts("dm") if "!answer" in t), None),
            "the question",
        )
        code = re.findall(r"!answer ([0-9a-f]{12})", notice)[0]
        # Only the code is read as words: an apostrophe in the answer is no open quote.
        answered = await world.command(f'!answer "{code}" don\'t mind, green')
        assert answered.startswith("Answered "), answered
        assert "answer: don't mind, green]" in (await world.reply(asked)).text
    finally:
        await world.close()


async def test_a_long_schedule_prompt_is_previewed_on_one_line_and_runs_whole(
    sworld: ScheduleWorld,
) -> None:
    steps = "\n".join(f"{n}. check the build log of job {n} and say what broke" for n in range(40))
    prompt = f"Every morning:\n{steps}\nThen summarise."
    answer = await sworld.command(f"/schedule in 2 hours {prompt}")
    # The confirmation used to echo all 42 lines before the next runs and the commands.
    first, *rest = answer.splitlines()
    shown = " ".join(prompt.split())[:120].rstrip()
    assert first == (
        f"Scheduled #1: once at 2026-11-24 12:00 (UTC): {shown}… (cut here: the whole prompt, "
        f"{len(prompt)} characters, is saved and runs)"
    )
    assert rest == ["Next runs: Tue 2026-11-24 12:00 UTC.", "/pause 1, /resume 1, /unschedule 1."]
    await sworld.advance_to("2026-11-24 12:00")
    await sworld.until(lambda: len(sworld.replies("dm")) == 2, "the run's reply")
    assert sworld.channel.texts("dm", "rejection") == [
        f"Scheduled run #1 (due Tue 2026-11-24 12:00 UTC): {shown}… (cut here: the whole "
        f"prompt, {len(prompt)} characters, is saved and runs)"
    ]
    assert sworld.agent.bodies()[-1].endswith(f"\n{prompt}"), "the agent got the whole prompt"


async def test_someone_who_may_not_decide_gets_one_answer_whether_or_not_a_code_exists(
    tmp_path: Path,
) -> None:
    world = ApprovalWorld(
        tmp_path, channel=BareChannel(), actions=ActionApprovalSettings(deciders="owners")
    )
    await world.start()
    try:
        await world.say("let me in", sender="stranger")
        card = await world.until(lambda: world.channel.texts("owners", "rejection"), "a card")
        approval = re.findall(r"!approve ([0-9a-f]{12})", card[0])[0]
        await world.say("ask:git_push")
        notice = await world.until(
            lambda: next((t for t in world.channel.texts("dm") if "asks to run" in t), None),
            "the action's text card",
        )
        action = re.findall(r"`!allow ([0-9a-f]{12})` to run it once", notice)[0]
        made_up = "0123456789ab"

        # Bob is allowed to talk to the bot but decides nothing. The answers used to differ
        # ("Only an owner...", "You may not decide this request...", "There is no action
        # approval ..."): enough to probe which codes exist and what they are.
        tried = {
            typed: await world.command(typed.format(approval, action, made_up), sender="bob")
            for typed in (
                "!approve {0}",
                "!approve {2}",
                "!deny {1} nope",
                "!allow {1}",
                "!allow {2}",
                "!answer {2} yes",
            )
        }
        codes = re.compile("|".join((approval, action, made_up)))
        answers = {typed: codes.sub("C", text) for typed, text in tried.items()}
        assert answers == dict.fromkeys(tried, not_yours("C"))
        assert len(await world.store.pending_approvals()) == 1, "nothing was decided"

        # An owner is still told what is there and what is not.
        assert await world.command(f"!approve {made_up}", sender="owner") == (
            f"There is no approval {made_up}."
        )
        assert await world.command(f"!allow {made_up}", sender="owner") == (
            f"There is no action approval {made_up}."
        )
    finally:
        await world.close()
