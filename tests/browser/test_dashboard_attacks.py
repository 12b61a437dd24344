"""Attacks on the dashboard from hostile pages, in a real browser (issue 27, 4-8): Debian's
headless Chromium driven by playwright, against the real dashboard app over real HTTP in
front of the real core (the fast tier's fake channel and agent). Each test is what the
attacker does, and asserts what the attacker got and what the operator's tasks went
through.

The evil origins live on other loopback addresses and ports; the rebinding name is
mapped to 127.0.0.1 by Chromium's resolver rule, and the page it first served comes from
the attacker's own server on 127.0.0.2 (how a rebinding starts: the name answered with
the attacker's address first)."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession, web
from playwright.async_api import Browser, Page, Route, async_playwright, expect

from gateway_bot.config.dashboard import DashboardSettings
from gateway_bot.core.application import Application
from gateway_bot.core.feed import ChangeFeed
from gateway_bot.core.live_state import DaemonLiveState
from gateway_bot.dashboard.context import STREAMS
from gateway_bot.dashboard.login_limits import LoginLimits
from gateway_bot.dashboard.server import build_app
from gateway_bot.dashboard.sessions import load_or_make_key
from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from tests.browser.test_dashboard_browser import CHROMIUM, CHROMIUM_ARGS
from tests.core.conftest import World
from tests.integration.dashboard.test_dashboard_security import NoContainers

TOKEN = "Xk3vP9qLm2Rt7wZa-e4"
SECRET_MESSAGE = "hold:job merge the payroll branch"
REBINDING_NAME = "evil.test"
WAIT_MS = 20_000
expect.set_options(timeout=WAIT_MS)
pytestmark = pytest.mark.timeout(120)


class Clock:
    """The login limits' clock, moved by the test instead of waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Dashboard:
    world: World
    port: int
    clock: Clock

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    async def running_task(self) -> str:
        """A task of alice's, running (held) until released: what attackers go for."""
        message = await self.world.say(SECRET_MESSAGE, sender="alice")
        await self.world.until(lambda: self.world.agent.running, "the task to run")
        return await self.world.task_id(message)

    async def state(self, task_id: str) -> TaskState:
        [task] = [t for t in await self.world.store.list_tasks(limit=100) if t.id == task_id]
        return task.state


@contextlib.asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[Dashboard]:
    world = World(tmp_path)
    feed = ChangeFeed()
    world.store.on_transition(feed.publish_transition)
    await world.start()
    application = Application(
        world.store,
        DaemonLiveState({world.channel.name: world.channel}, NoContainers()),  # type: ignore[arg-type]
        service=world.service,
    )
    clock = Clock()
    app = build_app(
        application,
        feed,
        DashboardSettings(token=TOKEN, operator={"fake": "owner"}),
        load_or_make_key(tmp_path / "dashboard"),
        database=world.store.database,
        login_limits=LoginLimits(clock=clock),
    )
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield Dashboard(world, runner.addresses[0][1], clock)
    finally:
        for subscription in list(app[STREAMS]):
            subscription.close()
        world.agent.release("job")
        await runner.cleanup()
        feed.close()
        await world.close()


@dataclass
class EvilServer:
    """Another program on this computer (or the attacker's server): serves the hostile
    page and writes down every request it gets, headers and all."""

    page: str
    seen: list[dict[str, str]] = field(default_factory=list)
    port: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(dict(request.headers))
        return web.Response(text=self.page, content_type="text/html")


@contextlib.asynccontextmanager
async def evil_server(address: str, page: str) -> AsyncIterator[EvilServer]:
    evil = EvilServer(page)
    app = web.Application()
    app.router.add_get("/{path:.*}", evil.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, address, 0).start()
    evil.port = runner.addresses[0][1]
    try:
        yield evil
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def chromium(*extra: str) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, *extra], headless=True
        )
        try:
            yield browser
        finally:
            await browser.close()


async def log_in(page: Page, base: str) -> None:
    await page.goto(base + "login")
    await page.fill("input[name=token]", TOKEN)
    await page.click("button[type=submit]")
    await expect(page).to_have_url(re.compile(r"/tasks$"))


async def loot(page: Page) -> dict[str, Any]:
    """What the hostile page's script reports it got."""
    await page.wait_for_function("window.done === true", timeout=WAIT_MS)
    found: dict[str, Any] = await page.evaluate("window.loot")
    return found


WITHOUT_PRIVATE_NETWORK_CHECKS = (
    "--disable-features=BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights,"
    "LocalNetworkAccessChecks"
)
"""Chromium alone refuses a public page's requests to loopback; Firefox and Safari do not,
and the dashboard must hold in them too: the test browser is one without that check."""

# -- 4: DNS rebinding ------------------------------------------------------------------------

REBINDING_PAGE = """<!doctype html><title>cat pictures</title><script>
window.loot = {logins: [], tasks: "", stop: null};
(async () => {
  try {
    for (const token of %(guesses)s) {
      const answer = await fetch("/login", {method: "POST", body: new URLSearchParams({token})});
      window.loot.logins.push(answer.status + " " + new URL(answer.url).pathname);
      if (answer.ok && answer.url.endsWith("/tasks")) break;
    }
    const tasks = await fetch("/tasks");
    window.loot.tasks = await tasks.text();
    const csrf = window.loot.tasks.match(/name="csrf" value="([^"]+)"/);
    const task = window.loot.tasks.match(/action="(\\/tasks\\/[0-9a-f]+\\/stop)"/);
    if (csrf && task) {
      const form = new URLSearchParams({csrf: csrf[1]});
      const stop = await fetch(task[1], {method: "POST", body: form});
      window.loot.stop = stop.status + " " + (await stop.text());
    }
  } catch (error) { window.loot.error = String(error); }
  window.done = true;
})();
</script>"""


async def test_a_rebound_page_neither_logs_in_nor_reads_nor_stops_a_task(tmp_path: Path) -> None:
    """The name ``evil.test`` first answered with the attacker's server (127.0.0.2), which
    served a script; then it answered 127.0.0.1, so the script's same-origin requests reach
    the dashboard on its port. It guesses tokens (a short list of likely ones, the right
    one among them), reads the task list and stops a task with the CSRF token it scraped."""
    guesses = ["password", "admin", "gateway-bot", "changeme", TOKEN]
    page_text = REBINDING_PAGE % {"guesses": json.dumps(guesses)}
    async with serving(tmp_path) as dashboard, evil_server("127.0.0.2", page_text) as evil:
        task_id = await dashboard.running_task()
        rebound = f"http://{REBINDING_NAME}:{dashboard.port}/"
        rule = f"--host-resolver-rules=MAP {REBINDING_NAME} 127.0.0.1"
        async with chromium(rule, WITHOUT_PRIVATE_NETWORK_CHECKS) as browser:
            page = await browser.new_page()

            async def first_answer(route: Route) -> None:  # the name still named 127.0.0.2
                await route.fulfill(
                    response=await route.fetch(url=f"http://127.0.0.2:{evil.port}/cats")
                )

            await page.route(rebound + "cats", first_answer)
            await page.goto(rebound + "cats")
            got = await loot(page)
        assert evil.seen, "the page came from the attacker's server"
        assert not any(line.endswith("/tasks") and line.startswith("200") for line in got["logins"])
        assert len(got["logins"]) == len(guesses), f"no guess got in: {got['logins']}"
        assert "payroll" not in got["tasks"], "the task list stayed unread"
        assert "alice" not in got["tasks"]
        assert got["stop"] is None, got["stop"]
        assert await dashboard.state(task_id) is TaskState.EXECUTING, "nothing stopped it"


# -- 5: a copied cookie after logout ---------------------------------------------------------


async def test_a_cookie_copied_before_logout_reads_and_stops_nothing_after_it(
    tmp_path: Path,
) -> None:
    """The operator logs out; someone who copied the session cookie before (a shared screen,
    a synced profile, a backup) puts it in another browser and tries the dashboard."""
    async with serving(tmp_path) as dashboard, chromium() as browser:
        task_id = await dashboard.running_task()
        operator = await browser.new_page()
        await log_in(operator, dashboard.base)
        copied = await operator.context.cookies()
        csrf = await operator.locator("input[name=csrf]").first.get_attribute("value")
        await operator.click("form[action='/logout'] button")
        await expect(operator).to_have_url(re.compile(r"/login$"))

        thief = await (await browser.new_context()).new_page()
        await thief.context.add_cookies(copied)  # type: ignore[arg-type]
        await thief.goto(dashboard.base + "tasks")
        await expect(thief).to_have_url(re.compile(r"/login$"))
        assert "payroll" not in await thief.content()
        stopped = await thief.evaluate(
            """async ([path, csrf]) => {
                const form = new URLSearchParams({csrf});
                const answer = await fetch(path, {method: "POST", body: form});
                return answer.status;
            }""",
            [f"/tasks/{task_id}/stop", csrf],
        )
        assert stopped == 401
        assert await dashboard.state(task_id) is TaskState.EXECUTING


async def test_log_out_everywhere_ends_the_other_browsers_session(tmp_path: Path) -> None:
    async with serving(tmp_path) as dashboard, chromium() as browser:
        laptop = await browser.new_page()
        phone = await (await browser.new_context()).new_page()
        await log_in(laptop, dashboard.base)
        await log_in(phone, dashboard.base)
        await laptop.click("form[action='/logout/everywhere'] button")
        await expect(laptop).to_have_url(re.compile(r"/login$"))
        await phone.goto(dashboard.base + "tasks")
        await expect(phone).to_have_url(re.compile(r"/login$"))


# -- 6: guessing the token -------------------------------------------------------------------

GUESSING = """async ([count, token]) => {
    const statuses = [];
    for (let n = 0; n < count; n++) {
        const form = new URLSearchParams({token: "guess-" + n});
        const answer = await fetch("/login", {method: "POST", body: form});
        statuses.push(answer.status);
    }
    const right = await fetch("/login", {method: "POST", body: new URLSearchParams({token})});
    return {statuses, right: right.status, at: new URL(right.url).pathname,
            retry: right.headers.get("Retry-After")};
}"""


async def test_three_hundred_guesses_are_paced_and_the_right_token_waits_too(
    tmp_path: Path,
) -> None:
    """A script on the login page sends 300 wrong tokens as fast as it can, then the right
    one: after a few free tries every answer is "too many attempts", the right token
    included (so the search cannot even tell it found it), and the wait doubles."""
    async with serving(tmp_path) as dashboard, chromium() as browser:
        page = await browser.new_page()
        await page.goto(dashboard.base + "login")
        burst = await page.evaluate(GUESSING, [300, TOKEN])
        assert burst["statuses"].count(401) <= 5, "a few free tries, then a wait"
        assert set(burst["statuses"][5:]) == {429}
        assert (burst["right"], burst["at"]) == (429, "/login"), "the right token waits too"
        waits = [int(burst["retry"])]
        for _ in range(2):  # the next wrong token after each wait earns twice the wait
            dashboard.clock.now += waits[-1]
            again = await page.evaluate(GUESSING, [1, TOKEN])
            waits.append(int(again["retry"]))
        assert waits == [1, 2, 4], waits
        dashboard.clock.now += waits[-1]
        await log_in(page, dashboard.base)  # after the wait, the right token works


# -- 7: another program on another port ------------------------------------------------------

OTHER_PORT_PAGE = """<!doctype html><title>local dev server</title><script>
(async () => { await fetch("/beacon"); window.loot = {}; window.done = true; })();
</script>"""


async def test_another_local_program_replaying_the_cookie_it_was_sent_gets_nothing(
    tmp_path: Path,
) -> None:
    """Cookies are scoped by host, not port: the operator's browser sends the dashboard's
    cookie to any program on 127.0.0.1 whose page it opens. That program replays the
    request it got, cookie and all, at the dashboard's port: read the tasks, then stop one
    with the CSRF token read there."""
    async with (
        serving(tmp_path) as dashboard,
        evil_server("127.0.0.1", OTHER_PORT_PAGE) as other,
        chromium() as browser,
    ):
        task_id = await dashboard.running_task()
        page = await browser.new_page()
        await log_in(page, dashboard.base)
        await page.goto(f"http://127.0.0.1:{other.port}/")
        await loot(page)
        [beacon] = [headers for headers in other.seen if "Cookie" in headers][-1:]
        assert "gwb_session" in beacon["Cookie"], "the browser sent the cookie to the other port"

        replayed = {k: v for k, v in beacon.items() if k.lower() not in ("host", "connection")}
        async with ClientSession() as program:
            tasks = await program.get(dashboard.base + "tasks", headers=replayed)
            text = await tasks.text()
            csrf = re.search(r'name="csrf" value="([^"]+)"', text)
            stop = await program.post(
                dashboard.base + f"tasks/{task_id}/stop",
                data={"csrf": csrf.group(1) if csrf else ""},
                headers=replayed,
            )
        assert "payroll" not in text, "the task list stayed unread"
        assert stop.status == 403
        assert await dashboard.state(task_id) is TaskState.EXECUTING


# -- 8: bidi controls ------------------------------------------------------------------------


async def test_a_bidi_override_in_a_message_shows_as_an_escape(tmp_path: Path) -> None:
    """``invoice\\u202efdp.exe`` would render as ``invoiceexe.pdf``: the page must show
    what the text holds, in the live table and on a fresh load."""
    async with serving(tmp_path) as dashboard, chromium() as browser:
        page = await browser.new_page()
        await log_in(page, dashboard.base)
        await expect(page.locator("#live-status")).to_have_text("Live.")
        message = await dashboard.world.say("please open invoice\u202efdp.exe\u2066")
        await dashboard.world.completed(message)
        row = page.locator("tr.task", has_text="please open")
        await expect(row.locator("td.state")).to_have_text("success")
        for _ in range(2):  # swapped in live, then loaded afresh
            preview = await row.locator("td.preview").inner_text()
            assert "\u202e" not in preview
            assert "invoice\\u202efdp.exe" in preview
            html = await page.content()
            assert not {"\u202e", "\u2066"} & set(html), "no bidi control anywhere on the page"
            await page.reload()
        completed = await dashboard.world.completed(message)
        assert completed.completion_reason is CompletionReason.SUCCESS
