"""Attacks on the dashboard, in-process: the real core (service, scheduler, store) with the
fast tier's fake channel and agent, served by the real dashboard app over real HTTP.

Each test is what an attacker tries: no cookie, a forged, tampered or expired cookie, a
form without the session's CSRF token, a cross-site request carrying a valid cookie, a
sender's message written as HTML, a config that would expose the login in clear text."""

from __future__ import annotations

import asyncio
import re
import secrets
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientResponse, ClientSession, CookieJar
from aiohttp.test_utils import TestServer

from gateway_bot.agents.claude.stream import parse_stream_line
from gateway_bot.config.dashboard import DashboardSettings, token_weakness
from gateway_bot.config.server import build_server_config
from gateway_bot.config.yaml_tags import ConfigError
from gateway_bot.core.application import Application
from gateway_bot.core.feed import ChangeFeed
from gateway_bot.core.live_state import DaemonLiveState
from gateway_bot.core.workspaces.directories import Workspaces
from gateway_bot.dashboard.context import APPLICATION
from gateway_bot.dashboard.server import build_app
from gateway_bot.dashboard.sessions import COOKIE_NAME, SessionBook, load_or_make_key
from gateway_bot.domain.lifecycle import CompletionReason, TaskState
from gateway_bot.sandbox.base import SandboxContainer
from gateway_bot.sandbox.host import HostSandbox
from gateway_bot.state.dashboard_sessions_store import DashboardSessions
from tests.conftest import gateway_env
from tests.core.conftest import World

TOKEN = "correct-horse-battery-staple"
PAGES = [
    "/",
    "/tasks",
    "/conversations",
    "/conversations/abcd1234",
    "/channels",
    "/approvals",
    "/charts",
]
EVIL_BODY = '<script>alert("owned")</script><img src=x onerror=alert(1)>'
EVIL_NAME = "<b>Mallory</b>"
FROM_THE_DASHBOARD = {"Sec-Fetch-Site": "same-origin"}
"""What a browser says of requests the dashboard's own pages make (the guard refuses pages
and actions it cannot tell came from the dashboard's origin)."""


class NoContainers:
    async def list_containers(self) -> list[SandboxContainer]:
        return []


class Dashboard:
    """The dashboard of one World, and a browser-like client for it."""

    def __init__(self, world: World, server: TestServer, key: bytes) -> None:
        self.world = world
        self.server = server
        self.key = key
        self.client = ClientSession(cookie_jar=CookieJar(unsafe=True), headers=FROM_THE_DASHBOARD)

    def url(self, path: str) -> str:
        return str(self.server.make_url(path))

    async def get(self, path: str, **kwargs: Any) -> ClientResponse:
        return await self.client.get(self.url(path), allow_redirects=False, **kwargs)

    async def post(self, path: str, data: dict[str, str], **kwargs: Any) -> ClientResponse:
        return await self.client.post(self.url(path), data=data, allow_redirects=False, **kwargs)

    async def log_in(self) -> str:
        """Log in; returns the CSRF token the pages carry."""
        response = await self.post("/login", {"token": TOKEN})
        assert response.status == 303
        return await self.csrf()

    async def csrf(self) -> str:
        page = await (await self.get("/tasks")).text()
        found = re.search(r'name="csrf" value="([^"]+)"', page)
        assert found, page
        return found.group(1)


@pytest.fixture
async def dashboard(tmp_path: Path) -> AsyncIterator[Dashboard]:
    world = World(tmp_path)
    feed = ChangeFeed()
    world.store.on_transition(feed.publish_transition)
    await world.start()
    assert world.service is not None
    application = Application(
        world.store,
        DaemonLiveState({world.channel.name: world.channel}, NoContainers()),  # type: ignore[arg-type]
        service=world.service,
        conversation_root=lambda conversation_id: tmp_path / "conversations" / conversation_id,
        context_files=lambda conversation_id: HostSandbox().files(
            Workspaces(tmp_path, "unused", None).execution_context(conversation_id)
        ),
        parse_line=parse_stream_line,
    )
    settings = DashboardSettings(token=TOKEN, operator={"fake": "owner"})
    key = load_or_make_key(tmp_path / "dashboard")
    server = TestServer(build_app(application, feed, settings, key, database=world.store.database))
    await server.start_server()
    made = Dashboard(world, server, key)
    yield made
    await made.client.close()
    await server.close()
    feed.close()
    await world.close()


async def running_task(dashboard: Dashboard) -> str:
    world = dashboard.world
    message = await world.say("hold:job a long job")
    await world.until(lambda: world.agent.running, "the task to run")
    return await world.task_id(message)


async def test_without_a_cookie_every_page_redirects_and_every_action_is_refused(
    dashboard: Dashboard,
) -> None:
    task_id = await running_task(dashboard)
    for path in PAGES:
        response = await dashboard.get(path)
        assert (response.status, response.headers.get("Location")) == (302, "/login"), path
    events = await dashboard.get("/events")
    assert events.status == 401
    for path, form in [
        (f"/tasks/{task_id}/stop", {}),
        ("/approvals/000000000000/decide", {"choice": "allow"}),
        ("/logout", {}),
    ]:
        response = await dashboard.post(path, form)
        assert response.status == 401, path
    # Claiming to come from loopback through a proxy header gains nothing.
    spoofed = await dashboard.get("/tasks", headers={"X-Forwarded-For": "127.0.0.1"})
    assert spoofed.status == 302
    assert (await dashboard.world.task("m1")).state is TaskState.EXECUTING, "nothing stopped it"
    dashboard.world.agent.release("job")


async def test_the_session_cookie_is_out_of_scripts_and_other_sites_reach(
    dashboard: Dashboard, tmp_path: Path
) -> None:
    login = await dashboard.post("/login", {"token": TOKEN})
    cookie = login.headers["Set-Cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    assert "Secure" not in cookie, "plain http on loopback: a Secure cookie would never return"

    behind_proxy = DashboardSettings(token=TOKEN, host="0.0.0.0", behind_proxy=True)
    app = build_app(
        _application_of(dashboard),
        ChangeFeed(),
        behind_proxy,
        dashboard.key,
        database=dashboard.world.store.database,
    )
    server = TestServer(app)
    await server.start_server()
    try:
        async with ClientSession(headers=FROM_THE_DASHBOARD) as client:
            proxied = await client.post(
                server.make_url("/login"), data={"token": TOKEN}, allow_redirects=False
            )
            cookie = proxied.headers["Set-Cookie"]
            assert "Secure" in cookie, "TLS ends at the proxy"
            assert cookie.startswith("__Host-"), "no other host or http page may shadow it"
    finally:
        await server.close()


def _application_of(dashboard: Dashboard) -> Application:
    return dashboard.server.app[APPLICATION]


async def test_a_wrong_token_gets_no_session(dashboard: Dashboard) -> None:
    response = await dashboard.post("/login", {"token": TOKEN[:-1] + "X"})
    assert response.status == 401
    assert "That token is not right." in await response.text()
    assert COOKIE_NAME not in {c.key for c in dashboard.client.cookie_jar}
    assert (await dashboard.get("/tasks")).status == 302


async def test_unknown_ended_expired_idle_and_other_token_sessions_are_refused(
    dashboard: Dashboard,
) -> None:
    store = DashboardSessions(dashboard.world.store.database)
    now = time.time()

    def book(token: str = TOKEN, at: float = now, hours: float = 12) -> SessionBook:
        return SessionBook(
            store, dashboard.key, token, lifetime_s=hours * 3600, idle_s=3600, clock=lambda: at
        )

    ended, session = await book().open()
    await book().end(session)
    candidates = [
        ("made up", secrets.token_urlsafe(32)),
        ("logged out", ended),
        ("made with another login token", (await book("another-token-of-16+").open())[0]),
        ("past its end", (await book(at=now - 7200, hours=1).open())[0]),
        ("idle for two hours", (await book(at=now - 7200).open())[0]),
        ("garbage", "v1.x.y.z"),
    ]
    for name, cookie in candidates:
        jar = {COOKIE_NAME: cookie}
        page = await dashboard.client.get(
            dashboard.url("/tasks"), cookies=jar, allow_redirects=False
        )
        assert page.status == 302, name
        events = await dashboard.client.get(dashboard.url("/events"), cookies=jar)
        assert events.status == 401, name
    genuine, _ = await book().open()
    ok = await dashboard.client.get(
        dashboard.url("/tasks"), cookies={COOKIE_NAME: genuine}, allow_redirects=False
    )
    assert ok.status == 200, "a live session of the configured token is accepted"


async def test_a_form_without_the_sessions_csrf_token_does_nothing(dashboard: Dashboard) -> None:
    task_id = await running_task(dashboard)
    await dashboard.log_in()
    someone_elses = SessionBook(
        DashboardSessions(dashboard.world.store.database),
        dashboard.key,
        TOKEN,
        lifetime_s=3600,
        idle_s=3600,
    )
    _, other_session = await someone_elses.open()
    for form in [
        {},
        {"csrf": ""},
        {"csrf": "0" * 43},
        {"csrf": someone_elses.csrf_token(other_session)},
    ]:
        response = await dashboard.post(f"/tasks/{task_id}/stop", form)
        assert response.status == 403, form
        assert "CSRF" in await response.text()
    assert (await dashboard.world.task("m1")).state is TaskState.EXECUTING
    dashboard.world.agent.release("job")


async def test_a_cross_site_request_is_refused_even_with_cookie_and_token(
    dashboard: Dashboard,
) -> None:
    """The attack that cost a peer's dashboard: a page on another site drives the
    operator's logged-in browser (a form post, an event stream)."""
    task_id = await running_task(dashboard)
    csrf = await dashboard.log_in()
    for headers in [
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
    ]:
        stop = await dashboard.post(f"/tasks/{task_id}/stop", {"csrf": csrf}, headers=headers)
        assert stop.status == 403, headers
        events = await dashboard.get("/events", headers=headers)
        assert events.status == 403, headers
    login_from_elsewhere = await dashboard.post(
        "/login", {"token": TOKEN}, headers={"Origin": "https://evil.example"}
    )
    assert login_from_elsewhere.status == 403
    assert (await dashboard.world.task("m1")).state is TaskState.EXECUTING
    same_site = await dashboard.post(
        f"/tasks/{task_id}/stop",
        {"csrf": csrf},
        headers={"Origin": f"http://{dashboard.server.host}:{dashboard.server.port}"},
    )
    assert same_site.status == 200
    assert f"Stopping task {task_id}" in await same_site.text()
    stopped = await dashboard.world.completed("m1")
    assert stopped.completion_reason is CompletionReason.CANCELLED


async def test_a_senders_html_is_shown_as_text_on_every_page(dashboard: Dashboard) -> None:
    world = dashboard.world
    await world.reply(await world.say(EVIL_BODY, sender="alice"))
    await world.say(EVIL_BODY, sender=EVIL_NAME)
    await world.until(lambda: world.channel.texts("owners", "card"), "the approval card")
    await dashboard.log_in()
    conversation_id = (await world.task("m1")).conversation_id
    assert conversation_id is not None
    for path in ["/tasks", "/conversations", f"/conversations/{conversation_id}", "/approvals"]:
        response = await dashboard.get(path)
        assert response.status == 200, path
        html = await response.text()
        assert "<script>alert" not in html, path
        assert "<img src=x" not in html, path
        assert "onerror=alert" not in html or "&lt;img" in html, path
    response = await dashboard.get("/tasks")
    tasks = await response.text()
    assert "&lt;script&gt;alert(&#34;owned&#34;)&lt;/script&gt;" in tasks
    policy = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy, "an inline script would not run even if one got in"
    approvals = await (await dashboard.get("/approvals")).text()
    assert "&lt;script&gt;" in approvals
    assert "<b>" not in approvals
    assert "&lt;b&gt;Mallory&lt;/b&gt;" in approvals, "the sender's name, as text"


async def test_an_approval_decided_on_the_dashboard_runs_the_held_message_once(
    dashboard: Dashboard,
) -> None:
    world = dashboard.world
    held = await world.say("hello from a stranger", sender="stranger")
    await world.until(lambda: world.channel.texts("owners", "card"), "the approval card")
    csrf = await dashboard.log_in()
    page = await (await dashboard.get("/approvals")).text()
    [code] = re.findall(r'data-code="([0-9a-f]{12})"', page)
    assert "Decide as" in page
    assert ">owner<" in page
    decided = await dashboard.post(f"/approvals/{code}/decide", {"csrf": csrf, "choice": "allow"})
    assert decided.status == 200
    assert "Allowed" in await decided.text()
    assert (await world.reply(held)).text == "Echo: hello from a stranger"
    again = await dashboard.post(f"/approvals/{code}/decide", {"csrf": csrf, "choice": "deny"})
    assert again.status == 404, "decided once; a second click finds nothing pending"
    await world.idle()
    assert world.replies().count("Echo: hello from a stranger") == 1
    assert len(world.channel.texts("owners", "card_update")) == 1, "the card shows the decision"


async def test_the_stop_button_cancels_and_the_live_stream_says_so(dashboard: Dashboard) -> None:
    task_id = await running_task(dashboard)
    csrf = await dashboard.log_in()
    page = await (await dashboard.get("/tasks")).text()
    assert f'action="/tasks/{task_id}/stop"' in page
    async with dashboard.client.get(dashboard.url("/events")) as stream:
        assert stream.status == 200
        assert await _next_event(stream) == ("hello", "Live.")
        stop = await dashboard.post(f"/tasks/{task_id}/stop", {"csrf": csrf})
        assert f"Stopping task {task_id}" in await stop.text()
        changes: list[str] = []
        while True:
            kind, data = await _next_event(stream)
            if kind == "change":
                changes.append(data)
            elif kind == "tasks" and "cancelled" in data:
                break  # the table the page swaps in shows it, without a reload
        assert any('"completion_reason": "cancelled"' in change for change in changes)
    page = await (await dashboard.get("/tasks")).text()
    assert re.search(rf'data-task="{task_id}">.*?<td class="state">cancelled</td>', page, re.S)


async def _next_event(stream: ClientResponse) -> tuple[str, str]:
    """One server-sent event: (event name, data joined across its data lines)."""
    kind, data = "message", []
    while True:
        line = (await stream.content.readline()).decode().rstrip("\r\n")
        if line.startswith("event:"):
            kind = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data.append(line.removeprefix("data:").removeprefix(" "))
        elif line == "" and data:
            return kind, "\n".join(data)


def test_a_non_loopback_host_without_tls_or_proxy_is_a_config_error() -> None:
    base = {"repo": {"url": "."}, "channels": {"console": {}}}
    with pytest.raises(ConfigError) as refused:
        build_server_config({**base, "dashboard": {"host": "0.0.0.0", "token": TOKEN}}, "test")
    assert "dashboard" in str(refused.value.problems)
    assert "behind_proxy" in str(refused.value.problems)
    proxied = build_server_config(
        {**base, "dashboard": {"host": "0.0.0.0", "token": TOKEN, "behind_proxy": True}}, "test"
    )
    assert proxied.dashboard is not None
    assert proxied.dashboard.behind_proxy
    with pytest.raises(ConfigError):
        build_server_config({**base, "dashboard": {"token": "short"}}, "test")
    with pytest.raises(ConfigError):
        build_server_config({**base, "dashboard": {}}, "test")  # never open without a token


def test_run_refuses_to_serve_the_dashboard_on_0_0_0_0(tmp_path: Path) -> None:
    config = tmp_path / "gateway-bot.yaml"
    config.write_text(
        f"state_dir: {tmp_path / 'state'}\nrepo: {{url: {tmp_path}}}\n"
        f"channels: {{console: {{}}}}\nsandbox: {{kind: none}}\n"
        f"dashboard: {{host: 0.0.0.0, token: {TOKEN}}}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "gateway_bot", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        env=gateway_env(),
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr
    assert "dashboard" in done.stderr
    assert "not loopback" in done.stderr
    assert not (tmp_path / "state").exists(), "refused before anything started"


async def test_an_operator_who_is_no_owner_decides_nothing(dashboard: Dashboard) -> None:
    """``dashboard.operator`` names who a decision is recorded as; the owners' list still
    decides whether that identity may, as for a button in chat."""
    world = dashboard.world
    await world.say("let me in", sender="stranger")
    await world.until(lambda: world.channel.texts("owners", "card"), "the approval card")
    [pending] = await _application_of(dashboard).pending_approvals()
    for operator, said in [
        ({"fake": "alice"}, "alice may not decide on fake"),
        ({}, "No operator identity for fake"),
    ]:
        settings = DashboardSettings(token=TOKEN, operator=operator)
        server = TestServer(
            build_app(
                _application_of(dashboard),
                ChangeFeed(),
                settings,
                dashboard.key,
                database=world.store.database,
            )
        )
        await server.start_server()
        try:
            async with ClientSession(
                cookie_jar=CookieJar(unsafe=True), headers=FROM_THE_DASHBOARD
            ) as client:
                await client.post(server.make_url("/login"), data={"token": TOKEN})
                page = await (await client.get(server.make_url("/approvals"))).text()
                csrf = re.search(r'name="csrf" value="([^"]+)"', page)
                assert csrf is not None
                decided = await client.post(
                    server.make_url(f"/approvals/{pending.code}/decide"),
                    data={"csrf": csrf.group(1), "choice": "allow"},
                )
                assert decided.status == 403
                assert said in await decided.text()
        finally:
            await server.close()
    assert [a.code for a in await _application_of(dashboard).pending_approvals()] == [pending.code]
    assert world.replies() == [], "the held message did not run"


async def test_a_rotated_login_token_ends_every_session_made_with_the_old_one(
    dashboard: Dashboard,
) -> None:
    """The token leaked and the operator changed it: every browser logged in with the old
    one is out at the daemon's next start, whatever its cookie says."""
    await dashboard.log_in()
    [cookie] = [c.value for c in dashboard.client.cookie_jar if c.key == COOKIE_NAME]
    rotated = DashboardSettings(token="a-brand-new-token-Qx7", operator={"fake": "owner"})
    app = build_app(
        _application_of(dashboard),
        ChangeFeed(),
        rotated,
        dashboard.key,
        database=dashboard.world.store.database,
    )
    server = TestServer(app)
    await server.start_server()
    try:
        rows = await dashboard.world.store.database.fetch_all("SELECT * FROM dashboard_sessions")
        assert rows == [], "swept at start"
        async with ClientSession(headers=FROM_THE_DASHBOARD) as client:
            page = await client.get(
                server.make_url("/tasks"), cookies={COOKIE_NAME: cookie}, allow_redirects=False
            )
            assert (page.status, page.headers.get("Location")) == (302, "/login")
    finally:
        await server.close()


async def test_only_the_names_the_dashboard_serves_are_answered(dashboard: Dashboard) -> None:
    """DNS rebinding: a page on a name that now points at 127.0.0.1 talks to the dashboard
    as its own origin, but its requests name it in ``Host``: refused before anything, the
    login, the static files and the metrics included."""
    port = dashboard.server.port
    for host in [
        f"evil.example:{port}",
        f"127.0.0.1.evil.example:{port}",
        f"localhost.evil.example:{port}",
        "evil.example",
        f"LOCALHOST.:{port}",
        f"user@127.0.0.1:{port}",
        "",
    ]:
        for path in ["/login", "/static/style.css", "/metrics", "/tasks"]:
            response = await dashboard.get(path, headers={"Host": host})
            assert response.status == 400, (host, path)
    for host in [f"127.0.0.1:{port}", f"localhost:{port}", f"LocalHost:{port}", "127.0.0.9"]:
        response = await dashboard.get("/login", headers={"Host": host})
        assert response.status == 200, host
    settings = DashboardSettings(
        token=TOKEN, host="127.0.0.1", public_url="https://bot.example.org/dash"
    )
    assert "bot.example.org" in settings.served_names()
    assert not DashboardSettings(token=TOKEN).serves_every_address()


async def test_a_page_opened_from_elsewhere_gets_only_a_link_to_continue(
    dashboard: Dashboard,
) -> None:
    """A link in a chat message (another site) or a page on another port of this host
    (same-site) opens no dashboard page by itself; the operator's click on "Continue" is a
    request from the dashboard's own origin."""
    await dashboard.log_in()
    port = dashboard.server.port
    for site, referer in [("cross-site", "https://chat.example/"), ("same-site", None)]:
        headers = {"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "navigate"}
        if referer:
            headers["Referer"] = referer
        for path, link in [
            ("/tasks", "/tasks"),
            ("/conversations//abc", "/conversations/abc"),
            ("/\\evil.example/x", "/tasks"),  # a browser reads /\ as //: another host
        ]:
            response = await dashboard.get(path, headers=headers)
            assert response.status == 403, (site, path)
            text = await response.text()
            assert f'<a href="{link}">' in text, text
            assert "Tasks</h1>" not in text
    other_port = {"Origin": f"http://127.0.0.1:{port + 1}", "Sec-Fetch-Site": "same-site"}
    events = await dashboard.get("/events", headers=other_port)
    assert events.status == 403


def test_check_warns_of_a_guessable_dashboard_token(tmp_path: Path) -> None:
    """16 characters pass the length rule; ``check`` says when they are easy to guess."""
    config = tmp_path / "gateway-bot.yaml"
    config.write_text(
        f"state_dir: {tmp_path / 'state'}\nrepo: {{url: {tmp_path}}}\n"
        "channels: {console: {}}\nsandbox: {kind: none}\n"
        "dashboard: {token: password12345678}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "gateway_bot", "check", "--config", str(config)],
        capture_output=True,
        text=True,
        env=gateway_env(),
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert "warning: the dashboard token is guessable" in done.stdout, done.stdout + done.stderr
    assert token_weakness("aaaaaaaaaaaaaaaa") is not None
    assert token_weakness(secrets.token_urlsafe(16)) is None


async def test_a_burst_of_guesses_holding_back_their_bodies_is_paced_too(
    dashboard: Dashboard,
) -> None:
    """The attack: thirty logins whose heads arrive at once, each holding back its body;
    then the wrong tokens' bodies, then the right one's. Every handler passed the pacing
    check at its head, before any wrong token was counted, so the whole burst was tried and
    the right token logged in."""
    url = dashboard.server.make_url("/login")

    async def head(token: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
        reader, writer = await asyncio.open_connection(url.host, url.port)
        body = f"token={token}".encode()
        writer.write(
            f"POST /login HTTP/1.1\r\nHost: {url.host}:{url.port}\r\n"
            "Sec-Fetch-Site: same-origin\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        )
        await writer.drain()
        return reader, writer, body

    async def status(sent: tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]) -> int:
        reader, writer, body = sent
        writer.write(body)
        await writer.drain()
        line = await reader.readline()
        writer.close()
        return int(line.split()[1])

    wrong = [await head(f"wrong-guess-{n:02d}") for n in range(29)]
    right = await head(TOKEN)
    await asyncio.sleep(0.3)  # every handler has read its head and waits for the body
    statuses = await asyncio.gather(*(status(sent) for sent in wrong))
    assert statuses.count(401) <= 5, statuses
    assert await status(right) == 429, "the right token waits too, however the burst is timed"
