"""The overview at /, as an operator reads it: the real core (a task really running, a
stranger's message really held for an owner), a known set of finished tasks written as
rows, the real dashboard app over real HTTP. Its figures are the fixture's, and every
figure's link lists the very tasks it counts."""

from __future__ import annotations

import html
import re
import time
from pathlib import Path

from gateway_bot.config.dashboard import DashboardSettings
from gateway_bot.core.status.overview import DAY_S, start_of_day
from gateway_bot.dashboard.context import APPLICATION
from gateway_bot.sandbox.base import SandboxContainer
from tests.integration.dashboard.test_dashboard_lists import add_task, listed
from tests.integration.dashboard.test_dashboard_pages import serve
from tests.integration.dashboard.test_dashboard_security import TOKEN


def cells(page: str, period: str) -> dict[str, str]:
    """A period's column of the figures table: figure (its cell's class) -> its text."""
    found = re.findall(rf'<td class="([a-z0-9-]+)" data-period="{period}">(.*?)</td>', page, re.S)
    assert found, page
    return {name: html.unescape(re.sub(r"<[^>]+>", "", text)).strip() for name, text in found}


async def test_the_overview_shows_what_runs_waits_and_the_periods_figures(
    tmp_path: Path,
) -> None:
    settings = DashboardSettings(token=TOKEN, operator={"fake": "owner"})
    async with serve(tmp_path, settings) as dashboard:
        world, store = dashboard.world, dashboard.world.store
        held = await world.say("hello from a stranger", sender="stranger")
        await world.until(lambda: world.channel.texts("owners", "card"), "the approval card")
        running = await world.say("hold:job a long job")
        await world.until(lambda: world.agent.running, "the task to run")
        running_task = await world.task(running)
        conversation_id = running_task.conversation_id
        assert conversation_id is not None
        now = time.time()
        midnight = start_of_day(now)
        today = midnight + (now - midnight) / 2
        this_week = midnight - 3 * DAY_S + 3600
        for created, ending, cost, ran in [
            (today, "success", 0.10, 10.0),
            (today, "success", 0.20, 30.0),
            (today, "execution_failed", 0.05, 50.0),
            (this_week, "cancelled", 0.40, 100.0),
            (this_week, "rejected", 0.0, 0.0),
            (midnight - 8 * DAY_S, "success", 9.99, 500.0),  # older than the week
        ]:
            await add_task(
                store, conversation_id=conversation_id, body="done before", created=created,
                ending=ending, cost=cost, ran_s=ran,
            )  # fmt: skip
        name = f"gwb-agent-{conversation_id}"
        dashboard.sandbox.containers = [SandboxContainer(name, conversation_id, "running", now)]
        await dashboard.log_in()
        response = await dashboard.get("/")
        assert response.status == 200
        page = await response.text()

        # What runs, linked to its conversation; what waits, linked to its decision.
        runs = page[page.index('<ul class="running">') :]
        assert f'<a href="/conversations/{conversation_id}"><code>{running_task.id}</code>' in runs
        waits = page[page.index('<ul class="waiting">') :]
        held_id = await world.task_id(held)
        [code] = [d.code for d in await dashboard.server.app[APPLICATION].pending_decisions()]
        assert f'data-task="{held_id}"' in waits
        assert f'href="/approvals#decision-{code}"' in waits
        assert "hello from a stranger" in waits

        # Today and the week: counts by how they ended, the rate, run times and cost.
        assert cells(page, "today") == {
            "tasks": "5", "succeeded": "2", "failed": "1", "stopped": "0", "refused": "0",
            "unfinished": "2", "failure-rate": "33.3 %", "p50": "30s", "p95": "48s",
            "cost": "$0.35",
        }  # fmt: skip
        assert cells(page, "7 days") == {
            "tasks": "7", "succeeded": "2", "failed": "1", "stopped": "1", "refused": "1",
            "unfinished": "2", "failure-rate": "33.3 %", "p50": "40s", "p95": "1m32s",
            "cost": "$0.75",
        }  # fmt: skip
        # Each count links to the list of exactly the tasks it counts.
        for period in ("today", "7 days"):
            links = re.findall(
                rf'<td class="([a-z]+)" data-period="{period}"><a href="([^"]+)">(\d+)</a>', page
            )
            assert {name for name, _, _ in links} == {
                "tasks", "succeeded", "failed", "stopped", "refused"
            }  # fmt: skip
            for _, link, count in links:
                shown = listed(await (await dashboard.get(html.unescape(link))).text())
                assert len(shown) == int(count), (period, link)

        # The channels' health and the containers with their memory.
        assert re.search(r'<li class="health-[a-z]+"><strong>fake</strong>', page)
        containers = page[page.index('<ul class="containers">') :]
        assert f"<code>{name}</code>" in containers
        assert f'href="/conversations/{conversation_id}"' in containers
        assert "memory 50.0 MiB" in containers
        world.agent.release("job")
