"""Every kind of pending decision on the dashboard, in a real browser (issue 30, item 2):
a new sender, an invitation to a room, the agent's command, a network write its sandbox
holds, the agent's question and a schedule the agent proposes all wait at once. The
operator sees each on the Approvals page, sees the tasks waiting for them as waiting (and
for what), finds the command's buttons in its task's timeline, and decides each one with
a press, which the agent, the sender and the schedules then feel.

Real Chromium, the real dashboard over HTTP, the real core with the fast tier's fake
channel and agent (``tests/support/dashboard_world.py``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from playwright.async_api import Page, expect

from gateway_bot.core.actions.network import network_asker
from gateway_bot.core.application import Application
from gateway_bot.core.decisions import PendingDecision
from gateway_bot.core.schedules.request_file import ScheduleAsk
from tests.browser.test_dashboard_attacks import chromium
from tests.support.dashboard_world import TOKEN, DecisionWorld, serving

WAIT_MS = 20_000
expect.set_options(timeout=WAIT_MS)


@dataclass(frozen=True)
class HeldPush:
    """What the egress proxy holds: a push to a repository (the fields the card reads)."""

    context_id: str
    method: str = "POST"
    host: str = "git.example.org"
    path: str = "/team/app.git/git-receive-pack"
    rule: str = "POST */git-receive-pack: ask"

    def describe(self) -> str:
        return f"git push to https://{self.host}/team/app.git\n  main: 1a2b -> 3c4d"


async def log_in(page: Page, base: str) -> None:
    await page.goto(base + "login")
    await page.fill("input[name=token]", TOKEN)
    await page.click("button[type=submit]")
    await expect(page.locator("nav")).to_be_visible()


async def press(page: Page, base: str, code: str, label: str) -> str:
    """On the Approvals page, press ``label`` on the card ``code``: the result's text."""
    await page.goto(base + "approvals")
    card = page.locator(f"article.decision[data-code='{code}']")
    await card.get_by_role("button", name=label, exact=True).click()
    return await page.locator(".result").inner_text()


async def test_every_kind_of_decision_is_listed_shown_on_its_task_and_decided(
    tmp_path: Path,
) -> None:
    world = DecisionWorld(tmp_path)
    async with serving(world, tmp_path) as dashboard:
        base = dashboard.base
        stranger = await world.say("let me in, please", sender="mallory")
        await world.hear({"kind": "invite", "room": "lab"}, "carol")
        push = await world.say("ask:git_push_origin_main", room="dev")
        question = await world.say("question:Postgres|SQLite", room="db")
        held = await world.say("hold:net", room="net")
        world.agent.schedule_requests.append(ScheduleAsk("every day at 18:30", "report", None))
        await world.reply(await world.say("propose a nightly report", room="ops"))
        await world.until(lambda: len(world.agent.running) == 3, "three runs to wait")
        assert world.service is not None
        assert world.service.action_approvals is not None
        net_conversation = str((await world.task(held)).conversation_id)
        ask_network = network_asker(world.service.action_approvals)
        network = asyncio.ensure_future(ask_network(HeldPush(net_conversation)))

        decisions = await _pending(dashboard.application, 6)
        codes = {d.kind: d.code for d in decisions}

        async with chromium() as browser:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            await log_in(page, base)
            await page.goto(base + "approvals")
            cards = page.locator("article.decision")
            await expect(cards).to_have_count(6)
            for kind, label in (
                ("sender", "A new sender"),
                ("room", "An invitation"),
                ("tool", "An agent action"),
                ("network", "A network write"),
                ("question", "The agent's question"),
                ("schedule", "A schedule the agent proposes"),
            ):
                card = page.locator(f"article.decision[data-code='{codes[kind]}']")
                await expect(card.locator(".kind")).to_have_text(label)
            tool_card = page.locator(f"article.decision[data-code='{codes['tool']}']")
            await expect(tool_card.locator(".title")).to_have_text("git push origin main")
            await expect(tool_card.locator("pre.details")).to_contain_text('Bash "git push*": ask')

            # The tasks page: the push's task waits, and says for what; so does the
            # stranger's held message.
            await page.goto(base + "tasks")
            push_row = page.locator("tr.task", has_text="ask:git_push_origin_main")
            await expect(push_row.locator("td.state")).to_contain_text("waiting")
            await expect(push_row.locator(".waiting-for")).to_contain_text("git push origin main")
            await expect(push_row.locator(".waiting-for")).to_contain_text(codes["tool"])
            stranger_row = page.locator("tr.task", has_text="let me in")
            await expect(stranger_row.locator(".waiting-for")).to_contain_text("Mallory")
            await expect(page.locator("tr.task", has_text="propose a nightly")).to_contain_text(
                "success"
            )

            # The push's timeline shows the code and its buttons; Allow once there.
            await push_row.locator("a[href^='/conversations/']").click()
            step = page.locator("section.timeline li.approval", has_text="waiting for an answer")
            await expect(step).to_contain_text(codes["tool"])
            await step.get_by_role("button", name="Allow once").click()
            await expect(page.locator(".result")).to_have_text(f"Allowed {codes['tool']}.")
            reply = await world.reply(push)
            assert "[allowed: allowed by owner]" in reply.text

            said = await press(page, base, codes["question"], "SQLite")
            assert said == f"Answered {codes['question']}: SQLite"
            assert "answer: SQLite" in (await world.reply(question)).text

            said = await press(page, base, codes["network"], "Deny")
            assert said == f"Denied {codes['network']}."
            assert await network == (False, "denied by owner")
            world.agent.release("net")

            said = await press(page, base, codes["schedule"], "Allow")
            assert said.startswith('Scheduled #1: "30 18 * * *"'), said

            said = await press(page, base, codes["sender"], "Allow")
            assert said.startswith("Allowed Mallory"), said
            assert (await world.reply(stranger)).text == "Echo: let me in, please"

            said = await press(page, base, codes["room"], "Deny")
            assert said.startswith("Ignored the invite to"), said

            await page.goto(base + "approvals")
            await expect(page.locator("article.decision")).to_have_count(0)
            await expect(page.locator(".empty")).to_have_text("Nothing is waiting for a decision.")
            await page.goto(base + "tasks")
            await expect(page.locator(".waiting-for")).to_have_count(0)
            await browser.close()


async def _pending(application: Application, count: int) -> list[PendingDecision]:
    """The pending decisions, once there are ``count`` (the cards go out as runs ask)."""
    for _ in range(2000):
        found = await application.pending_decisions()
        if len(found) >= count:
            return found
        await asyncio.sleep(0.005)
    raise AssertionError(f"{count} decisions never waited: {found}")
