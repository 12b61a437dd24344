"""The agent's ``git push`` waits for a decision, and the operator sees and decides it on the
dashboard (issue 30, item 2, as it was found): the real ``gateway-bot run`` with the real
Claude Code CLI against the fake model API, action approvals on, the dashboard in Chromium.

Before, the Approvals page said "Nothing is waiting for a decision", the Tasks page said
"executing", and the timeline ended "waiting for an answer" with no code and no buttons.
"""

from __future__ import annotations

import getpass
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from tests.browser.test_dashboard_browser import browser, log_in, open_page, stop_daemon
from tests.conftest import write_config
from tests.integration.agents.test_action_approvals_claude import PUSH, _bare_remote, _remote_log
from tests.integration.dashboard.test_dashboard_run import TOKEN, dashboard_url
from tests.support.fake_anthropic import FakeAnthropic

pytestmark = pytest.mark.slow
__all__ = ["browser"]  # the fixture


def test_the_agents_push_waits_on_the_tasks_page_and_is_allowed_from_its_timeline(
    gateway: Any, tmp_path: Path, fake_api: FakeAnthropic, browser: Browser
) -> None:
    remote = _bare_remote(tmp_path)
    before = _remote_log(remote)
    me = f"console:{getpass.getuser()}"
    config = write_config(
        tmp_path,
        remote,
        fake_api,
        agent={"approvals": {}, "max_warm_sessions": 0},
        dashboard={"port": 0, "token": TOKEN, "operator": {"console": me}},
        access={"owners": {"console": [me]}},
    )
    daemon = gateway("run", "--config", str(config))
    base = dashboard_url(daemon)
    page, dialogs = open_page(browser)
    log_in(page, base)
    page.goto(base + "tasks")
    expect(page.locator("#live-status")).to_have_text("Live.")

    daemon.send(f"SHOW_RESULT RUN_BASH {PUSH}")
    code = re.findall(r"!allow ([0-9a-f]{12})", daemon.expect(r"!allow [0-9a-f]{12}"))[0]

    row = page.locator("tr.task", has_text="RUN_BASH")
    expect(row.locator("td.state")).to_contain_text("waiting")
    expect(row.locator(".waiting-for")).to_contain_text("git push")
    expect(row.locator(".waiting-for")).to_contain_text(code)

    page.goto(base + "approvals")
    card = page.locator(f"article.decision[data-code='{code}']")
    expect(card.locator(".kind")).to_have_text("An agent action")
    expect(card.locator("pre.details")).to_contain_text("git push -q origin HEAD:main")

    page.goto(base + "tasks")
    row.locator("a[href^='/conversations/']").click()
    step = page.locator("section.timeline li.approval", has_text="waiting for an answer")
    expect(step).to_contain_text(code)
    step.get_by_role("button", name="Allow once").click()
    expect(page.locator(".result")).to_have_text(f"Allowed {code}.")

    daemon.expect(r"^agent> Echo: SHOW_RESULT")
    assert "approved-push" in _remote_log(remote)
    assert _remote_log(remote) != before
    page.goto(base + "tasks")
    expect(row.locator("td.state")).to_have_text("success")
    assert dialogs == []
    stop_daemon(daemon)
