"""The tasks list's filters in a real browser: the form is sent by htmx, the list changes in
place and the address bar carries the filters (a link to share); the live rows that arrive
afterwards keep to the filters, and a hostile message stays text.

Real Chromium, the real dashboard over HTTP, the real core with the fast tier's fake channel
and agent (``tests/support/dashboard_world.py``)."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.async_api import expect

from tests.browser.test_dashboard_attacks import chromium
from tests.browser.test_dashboard_decisions import log_in
from tests.support.dashboard_world import DecisionWorld, serving

WAIT_MS = 20_000
expect.set_options(timeout=WAIT_MS)


async def test_a_filtered_list_changes_in_place_keeps_its_url_and_its_live_rows_match(
    tmp_path: Path,
) -> None:
    world = DecisionWorld(tmp_path)
    async with serving(world, tmp_path) as dashboard, chromium() as browser:
        base = dashboard.base
        await world.say("hold:alpha ALPHA job", room="a")
        await world.until(lambda: world.agent.running, "the ALPHA task to run")
        page = await browser.new_page()
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: dialogs.append(dialog.message))
        await log_in(page, base)
        await page.goto(base + "tasks")
        await expect(page.locator("#live-status")).to_have_text("Live.")
        await expect(page.locator("tr.task", has_text="ALPHA")).to_have_count(1)
        loads: list[str] = []
        page.on("load", lambda loaded: loads.append(loaded.url))

        await page.fill("input[name=q]", "BETA")
        await page.click("form.filters button[type=submit]")
        await expect(page).to_have_url(re.compile(r"/tasks\?q=BETA$"))
        await expect(page.locator("tr.task")).to_have_count(0)
        await expect(page.locator("td.empty")).to_have_text("No tasks match these filters.")
        await expect(page.locator("#live-status")).to_have_text("Live.")

        beta = await world.say("BETA <img src=x onerror=alert(1)> job", room="b")
        await world.reply(beta)
        row = page.locator("tr.task", has_text="BETA")
        await expect(row.locator("td.state")).to_have_text("success")
        await expect(row.locator("td.preview")).to_contain_text("<img src=x onerror=alert(1)>")
        await world.say("hold:gamma GAMMA job", room="c")
        await world.until(lambda: len(world.agent.running) == 2, "the GAMMA task to run")
        await world.reply(await world.say("BETA again", room="d"))
        await expect(page.locator("tr.task", has_text="BETA again")).to_have_count(1)
        await expect(page.locator("tr.task")).to_have_count(2)  # GAMMA is no BETA
        assert loads == [], "the list changed in place, no page was loaded"

        await page.reload()  # the URL is the list: loaded afresh it shows the same
        await expect(page.locator("input[name=q]")).to_have_value("BETA")
        await expect(page.locator("tr.task")).to_have_count(2)
        await page.click("text=Clear")
        await expect(page).to_have_url(re.compile(r"/tasks$"))
        await expect(page.locator("tr.task")).to_have_count(4)
        assert dialogs == [], "no script from a message ran"
        world.agent.release("alpha")
        world.agent.release("gamma")
