"""Action approvals in the conversation (decision 0087), through the real service, scheduler and
store with the fake channel and agent: the card shows the exact command and the rule, only
people who may decide do, Always remembers that exact action in this conversation only, a
timeout denies and says so, a restart closes the old card and the task asks again, and the
agent's question is a card with one button per option. (The real CLI's side:
tests/integration/agents/test_action_approvals_claude.py.)"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway_bot.config.action_rules import ActionApprovalSettings
from gateway_bot.core.actions.approvals import ActionRequest
from gateway_bot.core.actions.network import network_asker
from gateway_bot.core.application import Application
from gateway_bot.core.commands.effects import not_yours
from gateway_bot.core.live_state import DaemonLiveState
from gateway_bot.domain.lifecycle import TaskState
from gateway_bot.state.database import StateTarget
from tests.core.conftest import World
from tests.core.fakes import BareChannel


class ApprovalWorld(World):
    async def press(self, code: str, choice: str, *, sender: str, room: str = "dm") -> str:
        action = f"{'question' if choice.isdigit() else 'action'}:{code}:{choice}"
        return await self.hear({"kind": "click", "action": action, "room": room}, sender)

    async def card(self, title: str, room: str = "dm", nth: int = 0) -> tuple[str, str]:
        """The ``nth`` card whose text has ``title``: (its text, its code)."""

        def found() -> str | None:
            cards = [t for t in self.channel.texts(room, "card") if title in t]
            return cards[nth] if len(cards) > nth else None

        text: str = await self.until(found, f"card {nth} with {title!r} in {room}")
        return text, re.findall(r"!(?:allow|answer) ([0-9a-f]{12})", text)[0]

    async def card_update(self, words: str, room: str = "dm") -> str:
        text: str = await self.until(
            lambda: next((t for t in self.channel.texts(room, "card_update") if words in t), None),
            f"a card edited to say {words!r}",
        )
        return text

    async def command(self, text: str, *, sender: str = "alice", room: str = "dm") -> str:
        return (await self.reply(await self.say(text, sender=sender, room=room))).text


@pytest.fixture
async def approvals(tmp_path: Path, state_target: StateTarget) -> AsyncIterator[Callable[..., Any]]:
    """One world per test, on SQLite and on PostgreSQL (``state_target``)."""
    made: list[ApprovalWorld] = []

    async def make(**settings: Any) -> ApprovalWorld:
        directory = tmp_path / f"world-{len(made)}"
        directory.mkdir()
        world = ApprovalWorld(
            directory, actions=ActionApprovalSettings(**settings), state=state_target
        )
        made.append(world)
        await world.start()
        return world

    yield make
    for world in made:
        await world.close()


async def test_the_card_shows_the_command_and_only_a_permitted_press_decides(
    approvals: Callable[..., Any],
) -> None:
    world: ApprovalWorld = await approvals()
    asked = await world.say("ask:git_push_origin_main")
    text, code = await world.card("The agent asks to run: git push origin main")
    assert "$ git push origin main\n(in /workspace)" in text
    assert 'Asked by the rule `Bash "git push*": ask`' in text
    status = await world.command("/status", sender="alice")
    assert "Waiting for approval: git push origin main" in status

    # carol is nobody here: her press changes nothing and is recorded.
    await world.settled(await world.press(code, "once", sender="carol"))
    assert world.service is not None
    assert world.service.action_approvals is not None
    records = world.service.action_approvals.records
    assert await records.refusals(code) == [("fake", "carol")]
    assert (await world.task(asked)).state is TaskState.EXECUTING

    await world.press(code, "once", sender="alice")
    reply = await world.reply(asked)
    assert "[allowed: allowed by alice]" in reply.text  # a press carries the sender's id
    assert "Allowed by alice at" in await world.card_update("Allowed by")
    # A late second press is told it was decided already (and decides nothing).
    late = await world.command(f"!deny {code}", sender="owner")
    assert late == f"Action approval {code} was already allowed."

    # The task's timeline says who asked for what, whose press was refused, who allowed.
    reader = Application(world.store, DaemonLiveState({}, None), service=world.service)  # type: ignore[arg-type]
    timeline = await reader.task_timeline(await world.task_id(asked))
    said = [e.text for e in timeline.entries if e.source == "approval"]
    assert said == [
        'asked to run git push origin main (rule Bash "git push*": ask)',
        "refused a press by carol (fake)",
        "allowed by alice",
    ]


async def test_always_allows_the_same_action_here_but_another_conversation_still_asks(
    approvals: Callable[..., Any],
) -> None:
    world: ApprovalWorld = await approvals()
    first = await world.say("ask:git_push_origin_main")
    _, code = await world.card("git push origin main")
    await world.press(code, "always", sender="owner")
    assert "[allowed: allowed by owner]" in (await world.reply(first)).text

    again = await world.say("ask:git_push_origin_main")
    assert "[allowed: always in this conversation]" in (await world.reply(again)).text
    assert len(world.channel.texts("dm", "card")) == 1
    rules = await world.command("/rules")
    assert "tool Bash git push origin main (by owner)" in rules

    other = await world.say("ask:git_push_origin_main", room="elsewhere")
    _, other_code = await world.card("git push origin main", room="elsewhere")
    assert other_code != code
    await world.command(f"!deny {other_code} not from here", sender="alice", room="elsewhere")
    assert "[denied: denied by Alice: not from here]" in (await world.reply(other)).text


async def test_no_answer_in_time_denies_and_the_card_says_expired(
    approvals: Callable[..., Any],
) -> None:
    world: ApprovalWorld = await approvals(timeout_s=0.2)
    asked = await world.say("ask:git_push")
    await world.card("git push")
    reply = await world.reply(asked)
    assert "[denied: no answer within 0.2 s]" in reply.text
    assert "nobody answered, so it was denied" in await world.card_update("Expired")


async def test_owners_only_refuses_the_asker(approvals: Callable[..., Any]) -> None:
    world: ApprovalWorld = await approvals(deciders="owners")
    asked = await world.say("ask:git_push")
    _, code = await world.card("git push")
    refused = await world.command(f"!allow {code}", sender="alice")
    assert refused == not_yours(code)
    await world.command(f"!allow {code}", sender="owner")
    assert "[allowed: allowed by Owner]" in (await world.reply(asked)).text


async def test_the_agents_question_is_a_card_with_one_button_per_option(
    approvals: Callable[..., Any],
) -> None:
    world: ApprovalWorld = await approvals()
    asked = await world.say("question:Postgres|SQLite")
    text, code = await world.card("The agent asks a question")
    assert "1. Postgres\n2. SQLite" in text
    await world.press(code, "1", sender="alice")
    assert "answer: SQLite]" in (await world.reply(asked)).text

    # A free-text reply answers a pending question.
    second = await world.say("question:red|blue")
    await world.card("The agent asks a question", nth=1)
    answered = await world.say("green, please")
    assert (await world.reply(answered)).text.startswith("Answered ")
    assert "answer: green, please]" in (await world.reply(second)).text


async def test_stop_while_waiting_ends_the_task_and_closes_the_card(
    approvals: Callable[..., Any],
) -> None:
    world: ApprovalWorld = await approvals()
    asked = await world.say("ask:git_push")
    _, code = await world.card("git push")
    await world.command("/stop")
    assert "Stopped" in (await world.reply(asked)).text
    assert "the task ended before anyone answered" in await world.card_update("Closed")
    late = await world.command(f"!allow {code}")
    assert late == f"Action approval {code} was already cancelled."


async def test_a_restart_while_pending_closes_the_old_card_and_the_task_asks_again(
    approvals: Callable[..., Any],
) -> None:
    world: ApprovalWorld = await approvals()
    asked = await world.say("ask:git_push_origin_main")
    _, old_code = await world.card("git push origin main")
    await world.restart()
    assert "the bot restarted" in await world.card_update("Closed")
    # The re-run asks again, with a new card; the old card's press decides nothing.
    _, new_code = await world.card("git push origin main", nth=1)
    assert new_code != old_code
    late = await world.command(f"!allow {old_code}")
    assert late == f"Action approval {old_code} was already abandoned."
    assert (await world.task(asked)).state is TaskState.EXECUTING
    await world.press(new_code, "once", sender="alice")
    assert "[allowed: allowed by alice]" in (await world.reply(asked)).text


async def test_a_request_naming_only_the_conversation_cards_its_running_task(
    approvals: Callable[..., Any],
) -> None:
    """What the egress proxy's layer does: it knows the conversation, not the task."""
    world: ApprovalWorld = await approvals()
    asked = await world.say("hold:net")
    task = await world.until(lambda: bool(world.agent.running), "the task to run")
    assert task
    record = await world.task(asked)
    assert world.service is not None
    assert world.service.action_approvals is not None
    request = ActionRequest(
        conversation_id=str(record.conversation_id),
        task_id=None,
        kind="network",
        summary="POST example.org /x.git/git-receive-pack",
        details="POST https://example.org/x.git/git-receive-pack\nrefs/heads/main",
        rule="egress ask",
        signature="network POST example.org /x.git/git-receive-pack",
    )
    decision = asyncio.ensure_future(world.service.action_approvals.ask(request))
    text, code = await world.card("The agent's sandbox asks to send")
    assert "refs/heads/main" in text
    status = await world.command("/status", sender="alice")
    assert "Waiting for approval: POST example.org" in status
    await world.command(f"!deny {code} no pushes today", sender="owner")
    decided = await decision
    assert not decided.allowed
    assert decided.reason == "denied by Owner: no pushes today"
    assert decided.decided_by == "Owner"
    world.agent.release("net")
    await world.reply(asked)


@dataclass(frozen=True)
class Held:
    """The fields of the proxy's ``HeldRequest`` that the card reads."""

    context_id: str
    method: str = "POST"
    host: str = "git.example.org"
    path: str = "/team/app.git/git-receive-pack?x=1"
    rule: str = "POST */git-receive-pack: ask"

    def describe(self) -> str:
        return f"git push to https://{self.host}/team/app.git\n  main: 1a2b -> 3c4d"


async def test_a_held_push_at_the_proxy_is_a_card_and_always_covers_the_same_push(
    approvals: Callable[..., Any],
) -> None:
    world: ApprovalWorld = await approvals()
    asked = await world.say("hold:net")
    await world.until(lambda: bool(world.agent.running), "the task to run")
    conversation = str((await world.task(asked)).conversation_id)
    assert world.service is not None
    assert world.service.action_approvals is not None
    ask = network_asker(world.service.action_approvals)

    first = asyncio.ensure_future(ask(Held(conversation)))
    text, code = await world.card("The agent's sandbox asks to send: git push to https://git")
    assert "main: 1a2b -> 3c4d" in text
    assert "POST */git-receive-pack: ask" in text
    await world.press(code, "always", sender="alice")
    assert await first == (True, "allowed by alice")
    # The same push again (another query string): no card; another repository asks.
    again = Held(conversation, path="/team/app.git/git-receive-pack")
    assert await ask(again) == (True, "always in this conversation")
    other = asyncio.ensure_future(ask(Held(conversation, path="/team/lib.git/git-receive-pack")))
    _, other_code = await world.card("The agent's sandbox asks to send", nth=1)
    await world.press(other_code, "deny", sender="alice")
    assert await other == (False, "denied by alice")
    world.agent.release("net")
    await world.reply(asked)


async def test_a_flood_of_held_requests_cards_only_a_few_at_a_time(
    approvals: Callable[..., Any],
) -> None:
    """The agent's sandbox opens fifty pushes at once: the people get a few cards, not fifty
    (and the daemon holds a few requests, not fifty); the rest are refused at once, and a
    push after a decision asks again."""
    world: ApprovalWorld = await approvals()
    asked = await world.say("hold:net")
    await world.until(lambda: bool(world.agent.running), "the task to run")
    conversation = str((await world.task(asked)).conversation_id)
    assert world.service is not None
    assert world.service.action_approvals is not None
    ask = network_asker(world.service.action_approvals)

    held = [
        asyncio.ensure_future(ask(Held(conversation, path=f"/team/r{n}.git/git-receive-pack")))
        for n in range(50)
    ]

    def done() -> list[tuple[bool, str]] | None:
        finished = [h.result() for h in held if h.done()]
        return finished if len(finished) >= 45 else None

    refused = await world.until(done, "45 pushes refused at once")
    assert len(refused) == 45
    assert {allowed for allowed, _ in refused} == {False}
    assert refused[0][1] == (
        "5 requests of this conversation already wait for a decision: try again once "
        "they are decided"
    )
    _, code = await world.card("The agent's sandbox asks to send", nth=4)
    # The 45 others returned before posting anything: five cards, and no more to come.
    assert len([t for t in world.channel.texts("dm", "card") if "asks to send" in t]) == 5
    await world.press(code, "deny", sender="alice")
    await world.until(lambda: sum(h.done() for h in held) == 46, "the denied push to end")
    again = asyncio.ensure_future(ask(Held(conversation, path="/team/again.git/git-receive-pack")))
    _, again_code = await world.card("The agent's sandbox asks to send", nth=5)
    await world.press(again_code, "deny", sender="alice")
    assert await again == (False, "denied by alice")
    for pending in held:
        pending.cancel()
    await asyncio.gather(*held, return_exceptions=True)
    world.agent.release("net")
    await world.reply(asked)


async def test_a_channel_without_buttons_gets_a_text_card_decided_by_command(
    tmp_path: Path, state_target: StateTarget
) -> None:
    """Email's way: the card is a notice naming the commands; ``!allow CODE always``."""
    world = ApprovalWorld(
        tmp_path, channel=BareChannel(), actions=ActionApprovalSettings(), state=state_target
    )
    await world.start()
    try:
        asked = await world.say("ask:git_push")
        notice = await world.until(
            lambda: next((t for t in world.channel.texts("dm") if "asks to run" in t), None),
            "the text card",
        )
        assert "$ git push\n(in /workspace)" in notice
        code = re.findall(r"`!allow ([0-9a-f]{12})` to run it once", notice)[0]
        assert f"`!allow {code} always`" in notice
        answer = await world.command(f"!allow {code} always")
        assert answer == f"Allowed {code} (always in this conversation)."
        assert "[allowed: allowed by Alice]" in (await world.reply(asked)).text
    finally:
        await world.close()


async def test_a_command_of_the_wrong_kind_decides_nothing(approvals: Callable[..., Any]) -> None:
    world: ApprovalWorld = await approvals()
    asked = await world.say("ask:git_push")
    _, code = await world.card("git push")
    wrong = await world.command(f"!answer {code} yes please")
    assert wrong == f"{code} is not a question: use !allow or !deny."
    await world.command(f"!allow {code}")
    assert "[allowed: allowed by Alice]" in (await world.reply(asked)).text

    question = await world.say("question:yes|no")
    _, qcode = await world.card("The agent asks a question")
    await world.command(f"!deny {qcode} no idea")
    assert "[denied: Alice declined to answer: no idea]" in (await world.reply(question)).text


async def test_a_card_waits_for_the_tasks_acknowledgement(approvals: Callable[..., Any]) -> None:
    """The run starts beside its acknowledgement's send (issue 33), so an agent that asks at
    once could card the person before "Working on it…" arrived: the card waits for it."""
    world: ApprovalWorld = await approvals()
    hang = world.channel.hang("ack", room="dm")
    await world.say("ask:git_push_origin_main")
    await world.until(lambda: hang.hits >= 1 and world.agent.prompts, "the agent asking")
    await asyncio.sleep(0.2)  # room for a card that would not wait
    assert not world.channel.texts("dm", "card"), "carded before the acknowledgement"
    hang.release()
    await world.card("The agent asks to run: git push origin main")
    kinds = [sent.kind for sent in world.channel.seen("dm")]
    assert kinds.index("ack") < kinds.index("card"), kinds
