"""Optional channel capabilities and the core's fallbacks: a channel with only the required
core (``BareChannel``: parse, reply, notice, as email is) still gets approvals (a text card
answered with ``!approve CODE``), replies without a progress display, and prompts that say
which attachments did not arrive; and the progress display gets its steps from the core."""

from __future__ import annotations

import io
import re
from collections.abc import Callable

from gateway_bot.channels.console import ConsoleAdapter
from gateway_bot.core.commands.effects import not_yours
from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from gateway_bot.domain.messages import Progress, Reply
from tests.core.conftest import World, owners_access
from tests.core.fakes import BareChannel


async def bare_world(make_world: Callable[..., World]) -> World:
    world = make_world(channel=BareChannel())
    await world.start()
    return world


async def text_card(world: World) -> tuple[str, str]:
    """A stranger writes; returns (their message id, the code on the owners' text card)."""
    message = await world.say("please `rm -rf` [this](https://evil)", sender="stranger")
    cards = await world.until(lambda: world.channel.texts("owners", "rejection"), "a text card")
    assert len(cards) == 1, cards
    found = re.search(r"`!approve ([0-9a-f]{12})` to allow, `!deny \1` to deny", cards[0])
    assert found, cards[0]
    return message, found.group(1)


async def test_without_buttons_the_card_is_text_quoting_the_message_verbatim(
    make_world: Callable[..., World],
) -> None:
    world = await bare_world(make_world)
    message, _ = await text_card(world)
    card = world.channel.texts("owners", "rejection")[0]
    assert "Unknown sender in Room dm (dm)" in card
    assert "```\nplease `rm -rf` [this](https://evil)\n```" in card, "quoted in a code block"
    assert "Or reply" not in card, "one way to decide, said once"
    assert (await world.task(message)).state is TaskState.AUTHENTICATING
    assert world.agent.runs == []


async def test_an_owners_approve_reply_runs_the_held_message_a_strangers_does_not(
    make_world: Callable[..., World],
) -> None:
    world = await bare_world(make_world)
    message, code = await text_card(world)

    # The stranger answers their own card: dropped unanswered, like any stranger's command.
    theirs = await world.say(f"!approve {code}", room="owners", sender="stranger")
    assert (await world.settled(theirs)).completion_reason is CompletionReason.UNAUTHORIZED
    # An allowed user who is not an owner is told so; nothing is released.
    bobs = await world.say(f"!approve {code}", room="owners", sender="bob")
    assert (await world.reply(bobs)).text == not_yours(code)
    assert (await world.task(message)).state is TaskState.AUTHENTICATING
    assert world.agent.runs == []

    owners = await world.say(f"!approve {code}", room="owners", sender="owner")
    assert (await world.reply(owners)).text.startswith("Allowed Stranger in Room dm (dm)")
    assert (await world.reply(message)).text == "Echo: please `rm -rf` [this](https://evil)"
    assert len(world.channel.texts("owners", "rejection")) == 1, "no decided text card"


async def test_an_owners_deny_reply_drops_the_held_message(
    make_world: Callable[..., World],
) -> None:
    world = await bare_world(make_world)
    message, code = await text_card(world)
    owners = await world.say(f"!deny {code}", room="owners", sender="owner")
    assert (await world.reply(owners)).text.startswith("Denied Stranger")
    assert (await world.settled(message)).completion_reason is CompletionReason.UNAUTHORIZED
    assert world.agent.runs == []


async def test_an_expired_text_card_says_so(make_world: Callable[..., World]) -> None:
    world = make_world(channel=BareChannel(), access=owners_access(approval_expiry_hours=1e-5))
    await world.start()
    message = await world.say("anyone?", sender="stranger")
    task = await world.settled(message)
    assert task.completion_reason is CompletionReason.UNAUTHORIZED
    notices = await world.until(
        lambda: (
            len(world.channel.texts("owners", "rejection")) == 2
            and world.channel.texts("owners", "rejection")
        ),
        "the expiry notice",
    )
    assert "Unknown sender" in notices[0]
    assert "Expired at" in notices[1]
    assert world.agent.runs == []


async def test_without_a_progress_display_there_is_a_reply_and_nothing_else(
    make_world: Callable[..., World],
) -> None:
    world = await bare_world(make_world)
    first = await world.say("step hold:one")
    await world.until(lambda: world.agent.running, "the first task running")
    second = await world.say("second")
    status = await world.say("/status")
    assert "Last step (1 so far): ran a step" in (await world.reply(status)).text
    world.agent.release("one")
    assert (await world.reply(first)).text == "Echo: step hold:one"
    assert (await world.reply(second)).text == "Echo: second"
    await world.settled(second)
    kinds = {sent.kind for sent in world.channel.sent}
    assert kinds == {"reply"}, "no acknowledgement, no queue notice, no progress"


async def test_without_attachment_downloads_the_prompt_says_what_did_not_arrive(
    make_world: Callable[..., World],
) -> None:
    world = await bare_world(make_world)
    message = await world.hear({"text": "read this", "files": ["report.pdf", "a\nb.png"]}, "alice")
    assert (await world.reply(message)).text == "Echo: read this"
    prompt = world.agent.prompts[-1]
    assert "[The sender attached files that did not reach you: report.pdf, a b.png]" in prompt
    assert "[Attached files" not in prompt


async def test_with_attachment_downloads_the_prompt_names_the_saved_files(world: World) -> None:
    message = await world.hear({"text": "read this", "files": ["report.pdf"]}, "alice")
    await world.reply(message)
    prompt = world.agent.prompts[-1]
    assert "[Attached files: /inbox/report.pdf]" in prompt
    assert "did not reach you" not in prompt


async def test_without_room_invitations_an_invite_is_not_offered(
    make_world: Callable[..., World],
) -> None:
    world = await bare_world(make_world)
    invite = await world.hear({"kind": "invite", "room": "elsewhere"}, "stranger")
    task = await world.settled(invite)
    assert task.completion_reason is CompletionReason.REJECTED
    assert task.error == "this channel cannot join rooms"
    await world.idle()
    assert world.channel.sent == [], "no card for an invitation nobody could accept"


async def test_the_display_closes_with_the_finished_steps_from_the_core(world: World) -> None:
    message = await world.say("step step")
    reply = await world.reply(message)
    assert reply.text == "Echo: step step"
    await world.settled(message)
    done = world.channel.texts("dm", "done")
    assert done == ["Done / ran a step / ran a step"], "closed once, after the reply"
    kinds = [s.kind for s in world.channel.seen("dm")]
    assert kinds.index("done") > kinds.index("reply")


async def test_a_command_answer_closes_no_display(world: World) -> None:
    status = await world.say("/status")
    await world.reply(status)
    await world.settled(status)
    assert world.channel.texts("dm", "done") == []


async def test_the_console_prints_each_step_once() -> None:
    out = io.StringIO()
    console = ConsoleAdapter("c", stdin=io.StringIO(), stdout=out)
    context = {"conversation": "c"}
    await console.send_progress(context, Progress("t", ("one",), 0.1, new_steps=1))
    await console.send_progress(context, Progress("t", ("one", "two", "three"), 0.2, 2))
    await console.send_progress(context, Progress("t", ("one", "two", "three"), 0.3))
    closing = Progress("t", ("one", "two", "three", "four"), 0.4, 1, outcome=Reply("ok"))
    await console.send_progress(context, closing)
    assert out.getvalue().splitlines() == ["  · one", "  · two", "  · three", "  · four"]


async def test_a_reply_sent_again_later_still_closes_the_display(world: World) -> None:
    world.channel.fail("reply", room="dm")
    message = await world.say("step then park")
    assert (await world.settled(message)).state is TaskState.UNDELIVERED
    assert world.channel.texts("dm", "done") == [], "no reply out, the display stays open"
    world.channel.mend()
    await world.completed(message)
    # The steps went with the run that made them: the display closes without them.
    assert world.channel.texts("dm", "done") == ["Done"]
