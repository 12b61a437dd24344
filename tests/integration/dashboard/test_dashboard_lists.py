"""The tasks and conversations lists as an operator uses them: the real core and store
(SQLite, and PostgreSQL where the store's queries differ), the real dashboard app over real
HTTP, a logged-in client. Tasks of a known week are written as rows (``add_task``), so each
filter is checked against what a person would expect to find, and nothing else."""

from __future__ import annotations

import contextlib
import html
import json
import re
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from aiohttp.test_utils import TestServer

from gateway_bot.config.dashboard import DashboardSettings
from gateway_bot.core.application import Application
from gateway_bot.core.feed import ChangeFeed
from gateway_bot.core.live_state import DaemonLiveState
from gateway_bot.dashboard.server import build_app
from gateway_bot.dashboard.sessions import load_or_make_key
from gateway_bot.domain.messages import InboundMessage, RawMessage
from gateway_bot.state.database import StateTarget
from gateway_bot.state.sql_store import SqlStore
from tests.core.conftest import World
from tests.integration.dashboard.test_dashboard_security import TOKEN, Dashboard, NoContainers

DAY = 86400
NOW = time.time()


@contextlib.asynccontextmanager
async def serve(tmp_path: Path, state: StateTarget | None = None) -> AsyncIterator[Dashboard]:
    world = World(tmp_path, state=state)
    feed = ChangeFeed()
    world.store.on_transition(feed.publish_transition)
    await world.start()
    application = Application(
        world.store,
        DaemonLiveState({world.channel.name: world.channel}, NoContainers()),  # type: ignore[arg-type]
        service=world.service,
    )
    settings = DashboardSettings(token=TOKEN, operator={"fake": "owner"})
    key = load_or_make_key(tmp_path / "dashboard")
    server = TestServer(build_app(application, feed, settings, key, database=world.store.database))
    await server.start_server()
    made = Dashboard(world, server, key)
    try:
        yield made
    finally:
        await made.client.close()
        await server.close()
        feed.close()
        await world.close()


async def add_task(
    store: SqlStore,
    *,
    conversation_id: str | None,
    body: str,
    created: float,
    channel: str = "slack",
    sender: tuple[str, str] = ("alice", "Alice Martin"),
    ending: str | None = "success",
    state: str = "completed",
    cost: float = 0.0,
    ran_s: float = 60.0,
    room_title: str = "",
) -> str:
    """One agent task as the store keeps it once done (or in ``state``); returns its id."""
    task_id = secrets.token_hex(6)
    message_id = f"m-{task_id}"
    raw = RawMessage(channel, message_id, sender[0], {"text": body}, created)
    parsed = InboundMessage(
        channel, message_id, sender[0], sender[1], body, "room", created, room_title=room_title
    )
    started = None if ending == "rejected" else created + 1
    completed = (started or created) + ran_s if state == "completed" else None
    await store.database.write(
        "INSERT INTO tasks (id, channel, message_id, conversation_id, state, completion_reason,"
        " raw_json, parsed_json, created_at, started_at, completed_at, cost_usd, kind)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'agent')",
        (task_id, channel, message_id, conversation_id, state,
         ending if state == "completed" else None, json.dumps(raw.to_json()),
         json.dumps(parsed.to_json()), created, started if state != "queued" else None,
         completed, cost),
    )  # fmt: skip
    return task_id


def listed(page: str) -> list[str]:
    """The task ids a tasks page lists, top to bottom."""
    return re.findall(r'<tr class="task" data-task="([0-9a-f]+)">', page)


async def tasks(dashboard: Dashboard, **query: str) -> list[str]:
    response = await dashboard.get("/tasks?" + urlencode(query))
    assert response.status == 200
    return listed(await response.text())


@pytest.fixture
async def week(
    tmp_path: Path, state_target: StateTarget
) -> AsyncIterator[tuple[Dashboard, dict[str, str]]]:
    """A dashboard over a week of known tasks, on each engine."""
    async with serve(tmp_path, state_target) as dashboard:
        store = dashboard.world.store
        chat = await store.create_conversation("slack", "C1:backend", None)
        mail = await store.create_conversation("email", "<bug@example.org>", None)
        day = lambda n: NOW - n * DAY  # noqa: E731
        chat_id, mail_id = chat.id, mail.id
        bob, grace = ("bob", "Bob Okafor"), ("grace@example.org", "Grace Hopper")
        ids = {
            "fix": await add_task(
                store, conversation_id=chat_id, created=day(6),
                body="Fix the flaky test\nin tests/test_orders.py",
            ),
            "failed": await add_task(
                store, conversation_id=chat_id, created=day(5), sender=bob,
                body="Bump aiohttp and run the suite", ending="execution_failed",
            ),
            "timeout": await add_task(
                store, conversation_id=mail_id, created=day(4), channel="email", sender=grace,
                body="Profile the search endpoint", ending="timeout",
            ),
            "cafe": await add_task(
                store, conversation_id=mail_id, created=day(3), channel="email", sender=grace,
                body='Menu for the "Café" at 50% off_peak',
            ),
            "stopped": await add_task(
                store, conversation_id=chat_id, created=day(2),
                body="Refactor the CSV exporter", ending="cancelled",
            ),
            "refused": await add_task(
                store, conversation_id=None, created=day(1), sender=("mallory", "Mallory"),
                body="Delete production", ending="rejected",
            ),
            "running": await add_task(
                store, conversation_id=chat_id, created=NOW - 60, state="executing", ending=None,
                body="<script>alert('x')</script> summarise PR #412",
            ),
        }  # fmt: skip
        await dashboard.log_in()
        yield dashboard, ids


async def test_each_filter_lists_what_matches_and_nothing_else(
    week: tuple[Dashboard, dict[str, str]],
) -> None:
    dashboard, ids = week
    every = [ids[k] for k in ("running", "refused", "stopped", "cafe", "timeout", "failed", "fix")]
    assert await tasks(dashboard) == every, "newest first"
    assert await tasks(dashboard, state="failed") == [ids["timeout"], ids["failed"]]
    assert await tasks(dashboard, state="succeeded") == [ids["cafe"], ids["fix"]]
    assert await tasks(dashboard, state="stopped") == [ids["stopped"]]
    assert await tasks(dashboard, state="refused") == [ids["refused"]]
    assert await tasks(dashboard, state="running") == [ids["running"]]
    assert await tasks(dashboard, channel="email") == [ids["cafe"], ids["timeout"]]
    assert await tasks(dashboard, channel="email", state="failed") == [ids["timeout"]]
    # A sender by id or by the name shown, letters in either case; a part of a name is not one.
    assert await tasks(dashboard, sender="bob") == [ids["failed"]]
    assert await tasks(dashboard, sender="grace hopper") == [ids["cafe"], ids["timeout"]]
    assert await tasks(dashboard, sender="Grace") == []
    day = lambda n: time.strftime("%Y-%m-%d", time.localtime(NOW - n * DAY))  # noqa: E731
    assert await tasks(dashboard, **{"from": day(4), "to": day(2)}) == [
        ids["stopped"], ids["cafe"], ids["timeout"]
    ]  # fmt: skip
    assert await tasks(dashboard, to=day(6)) == [ids["fix"]], "to includes its whole day"


async def test_the_search_finds_words_of_the_message_as_typed(
    week: tuple[Dashboard, dict[str, str]],
) -> None:
    dashboard, ids = week
    assert await tasks(dashboard, q="flaky TEST") == [ids["fix"]], "either case"
    assert await tasks(dashboard, q="test_orders.py") == [ids["fix"]], "on any line"
    assert await tasks(dashboard, q='"Café"') == [ids["cafe"]], "quotes and accents as typed"
    assert await tasks(dashboard, q="50%") == [ids["cafe"]]
    assert await tasks(dashboard, q="off_peak") == [ids["cafe"]]
    assert await tasks(dashboard, q="5_%") == [], "% and _ are no wildcards"
    # Only the message's words: not the sender, nor the fields the store keeps beside it.
    assert await tasks(dashboard, q="Bob Okafor") == []
    assert await tasks(dashboard, q="sender_id") == []
    assert await tasks(dashboard, q="exporter", state="failed") == []
    assert await tasks(dashboard, q="exporter", state="stopped") == [ids["stopped"]]


async def test_what_the_lists_show_is_text_and_the_filters_stay_in_the_links(
    week: tuple[Dashboard, dict[str, str]],
) -> None:
    dashboard, ids = week
    page = await (
        await dashboard.get("/tasks?" + urlencode({"q": "summarise", "sender": "<b>"}))
    ).text()
    assert "<script>alert" not in page
    assert 'value="&lt;b&gt;"' in page, "what was typed comes back escaped in its field"
    page = await (await dashboard.get("/tasks?q=summarise")).text()
    row = page[page.index(f'data-task="{ids["running"]}"') :]
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; summarise PR #412" in row
    assert '<form method="get" action="/tasks"' in page, "works without scripts"
    assert 'hx-push-url="true"' in page
    assert 'sse-connect="/events?q=summarise"' in page, "the live rows keep the filters"
    first = await (await dashboard.get("/tasks")).text()
    assert "Fix the flaky test</td>" in first, "a message's first line"
    for query, said in [
        ("state=lost", "There is no state"),
        ("from=yesterday", "must be written YYYY-MM-DD"),
    ]:
        page = await (await dashboard.get(f"/tasks?{query}")).text()
        assert said in page
        assert len(listed(page)) == 7, "a filter that does not read filters nothing"
    page = await (await dashboard.get("/tasks?after=nonsense_x")).text()
    assert len(listed(page)) == 7


async def test_the_conversations_list_has_counts_cost_activity_and_the_last_message(
    week: tuple[Dashboard, dict[str, str]],
) -> None:
    dashboard, _ = week
    store = dashboard.world.store
    await store.database.write("UPDATE tasks SET cost_usd = 0.25 WHERE conversation_id IS NOT NULL")

    async def rows(**query: str) -> list[list[str]]:
        page = await (await dashboard.get("/conversations?" + urlencode(query))).text()
        assert "<script>alert" not in page, "a message's markup is text"
        found = re.findall(r'<tr class="conversation[^"]*" data-conversation=.*?</tr>', page, re.S)
        return [
            [html.unescape(" ".join(re.sub(r"<[^>]+>", " ", cell).split()))
             for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in found
        ]  # fmt: skip

    await store.database.write("UPDATE conversations SET updated_at = ?", (NOW - 7 * DAY,))
    shown = await rows()
    assert [row[1:5] + row[6:] for row in shown] == [
        ["slack", "C1:backend", "4", "$1.0000",
         "<script>alert('x')</script> summarise PR #412"],
        ["email", "<bug@example.org>", "2", "$0.5000", 'Menu for the "Café" at 50% off_peak'],
    ], "most recently active first"  # fmt: skip
    assert shown[0][5] == time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(NOW - 60))
    assert [row[1] for row in await rows(channel="email")] == ["email"]
    assert [row[1] for row in await rows(sender="bob")] == ["slack"]
    assert [row[1] for row in await rows(q="search endpoint")] == ["email"]
    assert await rows(q="nothing says this") == []
    assert await rows(channel="matrix") == []
    await store.database.write("UPDATE conversations SET active = 0 WHERE channel = 'email'")
    assert [row[1] for row in await rows(state="active")] == ["slack"]
    assert [row[1] for row in await rows(state="ended")] == ["email"]
    day = time.strftime("%Y-%m-%d", time.localtime(NOW - 2 * DAY))
    assert [row[1] for row in await rows(**{"from": day})] == ["slack"], "last active since"
    assert [row[1] for row in await rows(to=day)] == ["email"]


async def test_every_task_is_on_exactly_one_page(tmp_path: Path) -> None:
    """130 tasks, some accepted at the same instant, a page at a time by the Older link; a
    task arriving meanwhile neither repeats nor hides one."""
    async with serve(tmp_path) as dashboard:
        store = dashboard.world.store
        made = []
        for n in range(130):
            at = NOW - DAY + (n // 3)  # threes share a moment
            ending = "execution_failed" if n % 2 else "success"
            made.append(
                await add_task(
                    store, conversation_id=None, created=at, body=f"job {n}", ending=ending
                )
            )
        await dashboard.log_in()
        for query, expected in [("", made), ("state=failed", made[1::2])]:
            seen: list[str] = []
            url = f"/tasks?{query}"
            pages = 0
            while url:
                page = await (await dashboard.get(url)).text()
                seen += listed(page)
                pages += 1
                if pages == 1:
                    await add_task(store, conversation_id=None, created=NOW, body="newcomer")
                older = re.search(r'<a href="(/tasks\?[^"]*after=[^"]*)" rel="next">', page)
                url = older.group(1).replace("&amp;", "&") if older else ""
                if older:
                    assert query in url, "the next page keeps the filter"
            assert len(seen) == len(set(seen)), "no task twice"
            assert seen == list(reversed(expected)), "every task, newest first"
            assert pages == (len(expected) + 49) // 50
