"""The dashboard in a real browser: Debian's headless chromium driven by playwright, against
a real `gateway-bot run` (the real claude CLI against the fake model API; console or the
fake Slack). What an operator does and sees: the login first; a task appearing and
completing in the open tasks page without a reload; the tool call in the conversation's
timeline; the Stop button; Allow on an approval running the held message once. The
page's scripts never run what an agent or a sender wrote (a dialog would fail the test).

Chromium comes from set-up (`scripts/setup.d/50-chromium.sh`); `playwright install` cannot
download browsers here, so playwright is pointed at /usr/bin/chromium."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from playwright.sync_api import Browser, Dialog, Page, expect, sync_playwright

from tests.conftest import write_config
from tests.integration.dashboard.test_dashboard_run import TOKEN, dashboard_url
from tests.integration.slack.test_slack_daemon import (
    ALICE,
    APPROVALS,
    BOB,
    GENERAL,
    MENTION,
    people,
    slack_config,
    start_socket_daemon,
)
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_slack import FakeSlack

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 60_000
expect.set_options(timeout=WAIT_MS)  # a loaded machine; a missing thing still fails


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield launched
        finally:
            launched.close()


def open_page(browser: Browser) -> tuple[Page, list[str]]:
    """A fresh browser profile's page; the returned list collects every dialog (an alert
    would mean a script from hostile text ran)."""
    page = browser.new_context().new_page()
    page.set_default_timeout(WAIT_MS)
    dialogs: list[str] = []

    def refuse(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", refuse)
    return page, dialogs


def log_in(page: Page, base: str) -> None:
    page.goto(base + "tasks")
    expect(page).to_have_url(re.compile(r"/login$"))
    page.fill("input[name=token]", TOKEN)
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/tasks$"))


def console_daemon(gateway: Any, tmp_path: Path, repo: Path, api: FakeAnthropic) -> tuple[Any, str]:
    config = write_config(tmp_path, repo, api, dashboard={"port": 0, "token": TOKEN})
    daemon = gateway("run", "--config", str(config))
    return daemon, dashboard_url(daemon)


def stop_daemon(daemon: Any) -> None:
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr


def test_the_login_is_required_and_a_wrong_token_gets_nothing(
    gateway: Any, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, browser: Browser
) -> None:
    daemon, base = console_daemon(gateway, tmp_path, target_repo, fake_api)
    page, _ = open_page(browser)
    for path in ("", "tasks", "conversations", "channels", "approvals", "charts"):
        page.goto(base + path)
        expect(page).to_have_url(re.compile(r"/login$"))
    page.fill("input[name=token]", "not-the-token-at-all")
    page.click("button[type=submit]")
    expect(page.locator(".error")).to_have_text("That token is not right.")
    assert page.context.cookies() == []
    log_in(page, base)
    expect(page.locator("h1")).to_have_text("Tasks")
    page.goto(base + "charts")
    expect(page.locator("canvas")).to_have_count(7)
    page.click("form[action='/logout'] button")
    expect(page).to_have_url(re.compile(r"/login$"))
    page.goto(base + "tasks")
    expect(page).to_have_url(re.compile(r"/login$"))
    stop_daemon(daemon)


def test_a_task_appears_live_completes_without_a_reload_and_its_timeline_shows_the_tool_call(
    gateway: Any, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, browser: Browser
) -> None:
    daemon, base = console_daemon(gateway, tmp_path, target_repo, fake_api)
    page, dialogs = open_page(browser)
    log_in(page, base)
    expect(page.locator("#live-status")).to_have_text("Live.")
    loads: list[str] = []
    page.on("load", lambda loaded: loads.append(loaded.url))

    fake_api.hold("LIVE PROBE")
    daemon.send("LIVE PROBE <script>alert('sender')</script>")
    assert fake_api.wait_for_held(60), daemon.stderr
    row = page.locator("tr.task", has_text="LIVE PROBE")
    expect(row.locator("td.state")).to_have_text("executing")
    expect(row.locator("button", has_text="Stop")).to_be_visible()
    fake_api.release()
    daemon.expect(r"^agent> Echo: LIVE PROBE")
    expect(row.locator("td.state")).to_have_text("success")
    expect(row.locator("button", has_text="Stop")).to_have_count(0)
    assert loads == [], "the table changed in place, no page was loaded"

    # The agent's network log holds a URL an attacker chose; it shows as text.
    conversation_id = row.locator("a[href^='/conversations/']").inner_text()
    log = tmp_path / "state" / "conversations" / conversation_id / "network.log"
    evil = "http://evil.example/<img src=x onerror=alert('net')>"
    log.write_text(json.dumps({"method": "GET", "url": evil, "allowed": False}) + "\n")
    row.locator("a[href^='/conversations/']").click()
    expect(page).to_have_url(re.compile(rf"/conversations/{conversation_id}$"))
    timeline = page.locator("section.timeline li.agent")
    expect(timeline.filter(has_text="Bash")).not_to_have_count(0)
    expect(timeline.filter(has_text="echo tool-ran")).not_to_have_count(0)
    expect(timeline.filter(has_text="result: tool-ran")).not_to_have_count(0)
    expect(page.locator("table.network tr.blocked code")).to_have_text(evil)
    expect(page.locator("table.network img")).to_have_count(0)
    page.goto(base + "tasks")
    expect(page.locator("tr.task td.preview", has_text="<script>")).to_have_count(1)
    assert dialogs == [], "no script from a sender or the network log ran"
    stop_daemon(daemon)


def test_the_stop_button_cancels_a_running_task(
    gateway: Any, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, browser: Browser
) -> None:
    daemon, base = console_daemon(gateway, tmp_path, target_repo, fake_api)
    fake_api.hold("STOP PROBE")
    daemon.send("STOP PROBE: a long job")
    assert fake_api.wait_for_held(60), daemon.stderr
    page, _ = open_page(browser)
    log_in(page, base)
    row = page.locator("tr.task", has_text="STOP PROBE")
    expect(row.locator("td.state")).to_have_text("executing")
    row.locator("button", has_text="Stop").click()
    expect(page.locator(".result")).to_contain_text("Stopping task")
    daemon.expect(r"^agent> Stopped\.")
    page.goto(base + "tasks")
    expect(row.locator("td.state")).to_have_text("cancelled")
    fake_api.release()
    stop_daemon(daemon)


def test_an_approval_allowed_on_the_dashboard_runs_the_held_message_once(
    gateway: Any,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    fake_slack: FakeSlack,
    browser: Browser,
) -> None:
    people(fake_slack)
    access = {
        "owners": {"slack": [ALICE]},
        "approval_destination": {"channel": "slack", "context": {"channel": APPROVALS}},
    }
    config = slack_config(tmp_path, target_repo, fake_api, fake_slack, access=access)
    settings = yaml.safe_load(config.read_text())
    settings["dashboard"] = {"port": 0, "token": TOKEN, "operator": {"slack": ALICE}}
    config.write_text(yaml.safe_dump(settings))
    daemon = start_socket_daemon(gateway, fake_slack, config)
    base = dashboard_url(daemon)

    ts = fake_slack.user_says(BOB, GENERAL, f"{MENTION} may I?")
    fake_slack.wait_until(
        lambda: next(iter(fake_slack.messages[APPROVALS]), None), what="an approval card"
    )
    page, _ = open_page(browser)
    log_in(page, base)
    page.click("nav a[href='/approvals']")
    approval = page.locator("article.decision", has_text="may I?")
    expect(approval).to_have_count(1)
    expect(approval).to_contain_text(ALICE)
    approval.locator("button", has_text="Allow").click()
    expect(page.locator(".result")).to_contain_text("Allowed")

    fake_slack.wait_for_reply(GENERAL, ts, "Echo: may I?")
    page.goto(base + "approvals")
    expect(page.locator("article.decision")).to_have_count(0)
    expect(page.locator(".empty")).to_have_text("Nothing is waiting for a decision.")
    page.goto(base + "tasks")
    expect(page.locator("tr.task", has_text="may I?").locator("td.state")).to_have_text("success")
    stop_daemon(daemon)
    echoes = [t for t in fake_slack.texts(GENERAL, ts) if "Echo: may I?" in t]
    assert len(echoes) == 1, "the held message ran once"
    card = fake_slack.thread(APPROVALS, next(iter(fake_slack.messages[APPROVALS]))["ts"])[0]
    assert "Allowed by" in card["blocks"][0]["text"]["text"], "the card shows the decision"
