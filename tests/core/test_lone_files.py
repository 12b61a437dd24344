"""Files sent without words (Element, Slack's mobile apps: the words come as the next
message) wait for their sender's words and run with them, once; alone past the wait they run
with a prompt saying only files arrived; a restart during the wait loses nothing."""

from __future__ import annotations

from collections.abc import Callable

from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from tests.core.conftest import World


async def _files(world: World, *names: str, sender: str = "alice", room: str = "dm") -> str:
    return await world.hear({"text": "", "files": list(names), "room": room}, sender)


async def test_files_then_words_are_one_run_with_both(make_world: Callable[..., World]) -> None:
    world = make_world(files_wait_s=60.0)
    await world.start()

    first = await _files(world, "photo.png")
    second = await _files(world, "scan.pdf")
    bobs = await world.say("what do these show?", sender="bob")  # not Alice's words
    await world.reply(bobs)
    words = await world.say("what do these show?")
    await world.reply(words)

    runs = [m for m in world.agent.runs if m.sender_id == "alice"]
    assert len(runs) == 1, world.agent.bodies()
    assert runs[0].body == "what do these show?"
    assert [a.filename for a in runs[0].attachments] == ["photo.png", "scan.pdf"]
    for files in (first, second):
        task = await world.completed(files)
        assert task.completion_reason is CompletionReason.SUCCESS
    assert len(world.replies()) == 2, "one answer to Bob, one to Alice's files and words"


async def test_files_alone_run_after_the_wait_saying_only_files_arrived(
    make_world: Callable[..., World],
) -> None:
    world = make_world(files_wait_s=0.05)
    await world.start()

    files = await _files(world, "photo.png")
    await world.reply(files)

    assert len(world.agent.runs) == 1
    assert "[Only files arrived: the sender wrote nothing with them]" in world.agent.prompts[0]
    assert "photo.png" in world.agent.prompts[0]


async def test_a_restart_during_the_wait_loses_nothing(make_world: Callable[..., World]) -> None:
    world = make_world(files_wait_s=60.0)
    await world.start()
    files = await _files(world, "photo.png")
    await world.idle()  # routed: it waits for the words, and no job waits with it
    assert (await world.task(files)).state is TaskState.AUTHENTICATING
    await world.restart()

    words = await world.say("and this is why")
    await world.reply(words)

    assert len(world.agent.runs) == 1
    assert world.agent.runs[0].body == "and this is why"
    assert [a.filename for a in world.agent.runs[0].attachments] == ["photo.png"]
    assert (await world.completed(files)).state is TaskState.COMPLETED
