"""The dashboard as an operator sees it (issue 32), in real Chromium at a desk's width and a
phone's, over a store holding a team's week (``tests/support/dashboard_data.py``) and live
decisions of several kinds waiting.

The crawl starts at "/" and follows every link of the dashboard's own pages, so a page
added later is looked at too. Each page, at both widths, must answer 200, raise no
console or page error (a CSP refusal is a console error), show no template syntax or
``None``/``undefined``/``NaN``, not overflow sideways, and have no serious or critical
accessibility violation by axe-core (npm, installed by scripts/setup.d/52-axe-core.sh).
The phone width is looked at in the dark scheme, the desk in the light one.

With GATEWAY_BOT_SCREENSHOTS=docs/images/dashboard, the pages the docs show are saved
there (docs/dashboard.md); CI leaves that unset.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import pytest
from playwright.async_api import Browser, BrowserContext, Page, expect

from gateway_bot.core.application import Application
from gateway_bot.core.schedules.request_file import ScheduleAsk
from gateway_bot.state.schedules_store import SqlSchedules
from tests.browser.test_dashboard_attacks import chromium
from tests.support.dashboard_data import add_schedules, fill_week
from tests.support.dashboard_world import OPERATOR, TOKEN, DecisionWorld, ServedDashboard, serving
from tests.support.paths import PROJECT_ROOT

AXE = PROJECT_ROOT / ".tools" / "node_modules" / "axe-core" / "axe.min.js"
SHOTS = os.environ.get("GATEWAY_BOT_SCREENSHOTS", "")
SHOWN = {"login", "overview", "tasks", "conversation", "task", "approvals", "charts"}
"""The pages whose screenshots the docs show."""
SHOT_HEIGHT = 2400
"""A long page's screenshot shows its top (a few hundred KB at most)."""
WIDTHS = {"desktop": (1400, 900, "light"), "phone": (390, 844, "dark")}
NOT_CRAWLED = ("/logout", "/events", "/metrics", "/static/", "/login")
MAX_PAGES = 40
EMPTY_LIST = "/tasks?state=refused&from=2099-01-01"
"""A list no task matches, looked at whatever the hour (its table holds no link)."""
RAW = re.compile(r"\{\{|\{%|\bNone\b|\bundefined\b|\bNaN\b")
STRANGER_SAYS = "can you check the staging deploy?"
WAIT_MS = 20_000
expect.set_options(timeout=WAIT_MS)
pytestmark = pytest.mark.timeout(240)


@contextlib.asynccontextmanager
async def a_busy_week(tmp_path: Path) -> AsyncIterator[tuple[ServedDashboard, str]]:
    """The dashboard over a week of tasks, schedules, and five decisions waiting: a new
    sender's message, an invitation, the agent's command, its question and a schedule it
    proposes. Yields the dashboard and the stranger's message id."""
    world = DecisionWorld(tmp_path)
    async with serving(world, tmp_path) as dashboard:
        now = time.time()
        await fill_week(world.store, now)
        await add_schedules(SqlSchedules(world.store.database), now)
        stranger = await world.say(STRANGER_SAYS, sender="mallory")
        await world.hear({"kind": "invite", "room": "lab"}, "carol")
        await world.say("ask:git_push_origin_main", room="dev")
        await world.say("question:Postgres|SQLite", room="db")
        world.agent.schedule_requests.append(ScheduleAsk("every day at 18:30", "report", None))
        await world.reply(await world.say("propose a nightly report", room="ops"))
        await pending(dashboard.application, 5)
        try:
            yield dashboard, stranger
        finally:
            # The agent's waiting runs end before the store closes (their last word is a write).
            for decision in await dashboard.application.pending_decisions():
                if decision.kind in ("tool", "question"):
                    choice = decision.choices[-1].value
                    await dashboard.application.decide(decision, choice, decider_id=OPERATOR)
            await world.idle()


async def pending(application: Application, count: int) -> None:
    for _ in range(2000):
        if len(await application.pending_decisions()) >= count:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{count} decisions never waited")


async def new_page(browser: Browser, width: str) -> tuple[BrowserContext, Page, list[str]]:
    w, h, scheme = WIDTHS[width]
    phone = width == "phone"
    context = await browser.new_context(
        viewport={"width": w, "height": h},
        color_scheme=scheme,  # type: ignore[arg-type]
        is_mobile=phone,
        has_touch=phone,
    )
    page = await context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return context, page, errors


async def log_in(page: Page, base: str) -> None:
    await page.goto(base + "login")
    await page.fill("input[name=token]", TOKEN)
    await page.click("button[type=submit]")
    await expect(page.locator("header.site nav")).to_be_visible()


def name_of(path: str) -> str:
    """The page's name for a screenshot: "/" is the overview, an id is its kind's page."""
    parts = [p for p in path.split("/") if p]
    if not parts:
        return "overview"
    if len(parts) == 2 and re.fullmatch(r"[0-9a-f]{8,}", parts[1]):
        return parts[0].rstrip("s")
    return "-".join(parts)


def kind_of(path: str) -> str:
    """Pages of one kind (every conversation's page): one of them is enough."""
    return re.sub(r"/[0-9a-f]{8,}", "/ID", path)


async def links(page: Page, base: str) -> list[str]:
    hrefs: list[str] = await page.eval_on_selector_all("a[href]", "as => as.map(a => a.href)")
    found = []
    for href in hrefs:
        url = urlsplit(urljoin(page.url, href))
        if f"{url.scheme}://{url.netloc}/" != base or url.path.startswith(NOT_CRAWLED):
            continue
        found.append(url.path + (f"?{url.query}" if url.query else ""))
    return found


async def look_at(page: Page, base: str, path: str, errors: list[str]) -> list[dict[str, Any]]:
    """Open ``path`` and check what a person would notice; axe's serious and critical
    violations are returned (the caller reports them all at once)."""
    response = await page.goto(base + path.lstrip("/"))
    assert response is not None, path
    assert response.status == 200, (path, response.status)
    await page.wait_for_load_state("load")
    text = await page.locator("body").inner_text()
    raw = RAW.search(text)
    assert raw is None, f"{path}: {raw.group(0)!r} in {text[max(0, raw.start() - 80) :][:160]!r}"
    widths = await page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"{path} overflows sideways: {widths}"
    if await page.evaluate("typeof window.axe") == "undefined":
        assert AXE.exists(), f"no {AXE}: bash scripts/setup.sh installs axe-core"
        axe = await asyncio.to_thread(AXE.read_text)
        await page.evaluate(axe + "\n;true")  # evaluate: past the page's CSP
    result = await page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    assert errors == [], f"{path}: {errors}"
    return [
        {
            "page": path,
            "id": v["id"],
            "impact": v["impact"],
            "nodes": [n["html"] for n in v["nodes"][:3]],
        }
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]


async def shoot(page: Page, name: str, width: str) -> None:
    if SHOTS and name in SHOWN:
        folder = Path(SHOTS)
        await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
        height = min(SHOT_HEIGHT, await page.evaluate("document.documentElement.scrollHeight"))
        clip = {"x": 0, "y": 0, "width": WIDTHS[width][0], "height": height}
        await page.screenshot(
            path=str(folder / f"{name}-{width}.png"),
            full_page=True,
            clip=clip,  # type: ignore[arg-type]
        )


async def test_every_page_reads_at_a_desk_and_on_a_phone(tmp_path: Path) -> None:
    async with a_busy_week(tmp_path) as (dashboard, _), chromium() as browser:
        base = dashboard.base
        violations: list[dict[str, Any]] = []
        visited: list[str] = []
        for width in WIDTHS:
            context, page, errors = await new_page(browser, width)
            violations += await look_at(page, base, "/login", errors)
            await shoot(page, "login", width)
            await page.fill("input[name=token]", "not the token")
            await page.click("button[type=submit]")
            await expect(page.locator("p.error")).to_be_visible()  # its field marked invalid
            assert [e for e in errors if "401 (Unauthorized)" not in e] == []  # no icon refused
            errors.clear()
            await log_in(page, base)
            if not visited:  # the crawl, at the first width; the second sees the same pages
                queue, kinds = ["/", EMPTY_LIST], {kind_of("/"), kind_of(EMPTY_LIST)}
                while queue and len(visited) < MAX_PAGES:
                    path = queue.pop(0)
                    violations += await look_at(page, base, path, errors)
                    await shoot(page, name_of(urlsplit(page.url).path), width)
                    visited.append(path)
                    for found in await links(page, base):
                        if kind_of(found) not in kinds:
                            kinds.add(kind_of(found))
                            queue.append(found)
            else:
                for path in visited:
                    violations += await look_at(page, base, path, errors)
                    await shoot(page, name_of(urlsplit(page.url).path), width)
            await context.close()
        assert violations == [], violations
        names = {name_of(path) for path in visited}
        assert {"tasks", "conversations", "conversation", "approvals", "charts"} <= names, visited
        assert {"channels", "schedules"} <= names, visited


async def test_on_a_phone_a_new_sender_is_allowed_in_two_taps(tmp_path: Path) -> None:
    async with a_busy_week(tmp_path) as (dashboard, stranger), chromium() as browser:
        world = dashboard.world
        context, page, errors = await new_page(browser, "phone")
        await log_in(page, dashboard.base)
        await page.goto(dashboard.base)
        approvals = page.locator("header.site a[href='/approvals']")
        await expect(approvals).to_be_in_viewport()
        await expect(approvals.locator(".badge")).to_have_text("5")

        await approvals.tap()  # one
        card = page.locator("article.decision.kind-sender", has_text="mallory")
        await card.get_by_role("button", name="Allow", exact=True).tap()  # two

        await expect(page.locator(".result")).to_contain_text("Allowed")
        assert (await world.reply(stranger)).text == f"Echo: {STRANGER_SAYS}"
        await page.goto(dashboard.base + "approvals")
        await expect(page.locator("header.site a[href='/approvals'] .badge")).to_have_text("4")
        assert errors == []
        await context.close()
