"""A faithful fake of Slack for driving the real daemon offline: the Web API methods the
channel uses, Socket Mode (``apps.connections.open`` + a websocket speaking the envelope
protocol), file download and upload endpoints, and a client that sends correctly signed
HTTP events and interactive payloads the way Slack does.

What it keeps is what a Slack user would see: every channel's messages with their thread,
text, blocks, metadata, files and edit history. ``user_says`` plays a person typing (the
message appears in the channel and its events go out, ``message`` and, for a mention in a
channel, ``app_mention`` too); ``click`` plays a person pressing a button that is really on
a message. Envelopes stay pending until acked and are redelivered (``retry_attempt`` + 1)
on the next connection, as Slack does.

Like fake_anthropic, the server runs on its own thread and event loop so that sync tests
(driving the daemon through a subprocess) and async tests can share it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiohttp import WSMsgType, web

JSON = dict[str, Any]
TEAM = "T0TEAM"
OTHER_TEAM = "T0OTHER"
BOT_USER = "U0BOT"
BOT_ID = "B0BOT"
BOT_TOKEN = "xoxb-fake-bot-token"
APP_TOKEN = "xapp-fake-app-token"
SIGNING_SECRET = "fake-signing-secret"


class FakeSlack:
    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._ids = itertools.count(1)
        self._last_ts = 0.0
        self._port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.reset()

    # ----- state a test sets up and reads ---------------------------------------------
    def reset(self) -> None:
        with self._lock:
            self.users: dict[str, JSON] = {}
            self.channels: dict[str, JSON] = {}
            self.usergroups: dict[str, list[str]] = {}
            self.messages: dict[str, list[JSON]] = {}
            self.files: dict[str, JSON] = {}
            self.calls: list[tuple[str, JSON]] = []
            self.acks: list[str] = []
            self.pending: dict[str, JSON] = {}
            self.connections_opened = 0
            self.hellos = 0
            self.connection_error: str | None = None
            self.connection_answers: list[Any] = []
            """JSON answers apps.connections.open gives as they are, one per call, before
            the normal ones (a malformed answer, say)."""
            self.hold_post: str | None = None
            self.held = threading.Event()
            self.http_target: str | None = None
            self.bot_in: set[str] = set()
        self._sockets: list[tuple[int, web.WebSocketResponse, web.Request]] = []
        self._release = threading.Event()
        self.add_user(BOT_USER, "gateway", is_bot=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/api/"

    def add_user(self, user_id: str, name: str, *, team: str = TEAM, **flags: bool) -> None:
        with self._lock:
            self.users[user_id] = {
                "id": user_id,
                "team_id": team,
                "name": name.lower(),
                "real_name": name,
                "profile": {"display_name": name, "real_name": name},
                "deleted": flags.get("deleted", False),
                "is_bot": flags.get("is_bot", False),
                "is_restricted": flags.get("guest", False),
                "is_ultra_restricted": False,
            }

    def add_channel(self, channel_id: str, name: str = "", *, im_with: str = "") -> None:
        with self._lock:
            self.channels[channel_id] = {
                "id": channel_id,
                "name": name,
                "is_im": bool(im_with),
                "user": im_with,
            }
            self.messages.setdefault(channel_id, [])

    def thread(self, channel: str, root_ts: str) -> list[JSON]:
        """The root message and its replies, oldest first."""
        with self._lock:
            return [
                dict(m)
                for m in self.messages.get(channel, [])
                if m["ts"] == root_ts or m.get("thread_ts") == root_ts
            ]

    def bot_posts(self, channel: str, root_ts: str) -> list[JSON]:
        return [m for m in self.thread(channel, root_ts) if m.get("user") == BOT_USER]

    def texts(self, channel: str, root_ts: str) -> list[str]:
        return [m.get("text", "") for m in self.bot_posts(channel, root_ts)]

    def calls_to(self, method: str) -> list[JSON]:
        with self._lock:
            return [args for name, args in self.calls if name == method]

    def wait_until(self, check: Callable[[], Any], timeout: float = 60, what: str = "") -> Any:
        """Wait until ``check()`` is truthy (re-checked on every change); fail with the state."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                result = check()
                if result:
                    return result
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"timed out waiting for {what or check}; messages: "
                        + json.dumps(self.messages, indent=1)[-6000:]
                    )
                self._lock.wait(min(left, 0.2))

    def wait_for_reply(self, channel: str, root_ts: str, needle: str, timeout: float = 90) -> JSON:
        def found() -> JSON | None:
            hits = [m for m in self.bot_posts(channel, root_ts) if needle in m.get("text", "")]
            return hits[0] if hits else None

        return self.wait_until(found, timeout, f"a reply containing {needle!r}")  # type: ignore[no-any-return]

    # ----- people -----------------------------------------------------------------------
    def user_says(
        self,
        user: str,
        channel: str,
        text: str,
        *,
        thread_ts: str | None = None,
        files: list[tuple[str, bytes]] | None = None,
        team: str = TEAM,
        via: str = "socket",
        remote_files: list[tuple[str, str]] | None = None,
    ) -> str:
        """A person posts; the message is in the channel and its events go out. Returns ts."""
        ts, bodies = self.says(
            user,
            channel,
            text,
            thread_ts=thread_ts,
            files=files,
            team=team,
            remote_files=remote_files,
        )
        for body in bodies:
            self.deliver(body, via)
        return ts

    def says(
        self,
        user: str,
        channel: str,
        text: str,
        *,
        thread_ts: str | None = None,
        files: list[tuple[str, bytes]] | None = None,
        team: str = TEAM,
        remote_files: list[tuple[str, str]] | None = None,
    ) -> tuple[str, list[JSON]]:
        """The message appears in the channel; returns its ts and the event bodies Slack
        sends for it (``message``, and ``app_mention`` for a mention outside a DM).
        ``remote_files`` (name, url) are external files: Slack hands their own URL on as
        ``url_private`` (files.remote.add, Google Drive and the like)."""
        with self._lock:
            ts = self._next_ts()
            is_im = self.channels[channel]["is_im"]
            user_team = self.users.get(user, {}).get("team_id", team)
            event: JSON = {
                "type": "message",
                "channel": channel,
                "user": user,
                "text": text,
                "ts": ts,
                "event_ts": ts,
                "team": user_team,
                "channel_type": "im" if is_im else "channel",
            }
            if thread_ts:
                event["thread_ts"] = thread_ts
            if files or remote_files:
                event["subtype"] = "file_share"
                event["files"] = [self._store_file(name, data, user) for name, data in files or []]
                event["files"] += [self._remote_file(n, url, user) for n, url in remote_files or []]
            self.messages[channel].append(dict(event))
            self._lock.notify_all()
        bodies = [self.event_body(event, team)]
        if f"<@{BOT_USER}>" in text and not is_im:
            mention = {k: v for k, v in event.items() if k not in ("channel_type", "subtype")}
            bodies.append(self.event_body(dict(mention, type="app_mention"), team))
        return ts, bodies

    def adds_bot(self, inviter: str, channel: str, *, via: str = "socket") -> None:
        """A person adds the bot to a channel (apps join at once; Slack tells the app)."""
        with self._lock:
            self.bot_in.add(channel)
        event = {
            "type": "member_joined_channel",
            "user": BOT_USER,
            "channel": channel,
            "channel_type": "C",
            "team": TEAM,
            "inviter": inviter,
            "event_ts": self._next_ts(),
        }
        self.deliver(self.event_body(event), via)

    def edits(self, channel: str, ts: str, text: str, *, via: str = "socket") -> None:
        """The author edits a message: Slack sends ``message_changed``."""
        with self._lock:
            message = next(m for m in self.messages[channel] if m["ts"] == ts)
            message["text"] = text
            changed = dict(message, edited={"user": message["user"], "ts": self._next_ts()})
        event = {
            "type": "message",
            "subtype": "message_changed",
            "channel": channel,
            "ts": self._next_ts(),
            "message": changed,
            "previous_message": dict(message),
            "channel_type": "channel",
            "hidden": True,
        }
        self.deliver(self.event_body(event), via)

    def click(
        self,
        user: str,
        channel: str,
        message_ts: str,
        action_id: str,
        *,
        team: str = TEAM,
        via: str = "socket",
    ) -> int | None:
        """A person presses a button that is on the message now (else AssertionError)."""
        with self._lock:
            message = next(m for m in self.messages[channel] if m["ts"] == message_ts)
            buttons = [
                e
                for b in message.get("blocks") or []
                if b.get("type") == "actions"
                for e in b.get("elements", [])
            ]
            pressed = [b for b in buttons if b["action_id"] == action_id]
            assert pressed, f"no button {action_id!r} on the message; it has {buttons}"
            user_info = self.users[user]
        action = dict(pressed[0], block_id="gateway_bot_card", action_ts=self._next_ts())
        payload = {
            "type": "block_actions",
            "api_app_id": "A0APP",
            "token": "legacy-token",
            "user": {
                "id": user,
                "username": user_info["name"],
                "name": user_info["name"],
                "team_id": user_info["team_id"],
            },
            "team": {"id": team, "domain": "fake"},
            "container": {
                "type": "message",
                "message_ts": message_ts,
                "channel_id": channel,
                "is_ephemeral": False,
            },
            "channel": {"id": channel, "name": self.channels[channel]["name"]},
            "message": message,
            "trigger_id": f"trig-{next(self._ids)}",
            "response_url": f"http://127.0.0.1:{self._port}/respond",
            "actions": [action],
            "state": {"values": {}},
        }
        return self.deliver(payload, via, interactive=True)

    def event_body(self, event: JSON, team: str = TEAM) -> JSON:
        return {
            "token": "legacy-token",
            "team_id": team,
            "api_app_id": "A0APP",
            "event": event,
            "type": "event_callback",
            "event_id": f"Ev{next(self._ids):08d}",
            "event_time": int(time.time()),
            "is_ext_shared_channel": False,
            "authorizations": [{"team_id": team, "user_id": BOT_USER, "is_bot": True}],
        }

    # ----- delivery ---------------------------------------------------------------------
    def deliver(self, payload: JSON, via: str, *, interactive: bool = False) -> int | None:
        """Socket Mode: queue an envelope (sent now if connected). HTTP: POST it signed,
        return the HTTP status."""
        if via == "http":
            return self.post_signed(payload, interactive=interactive)
        envelope = {
            "envelope_id": f"env-{next(self._ids)}",
            "type": "interactive" if interactive else "events_api",
            "accepts_response_payload": False,
            "retry_attempt": 0,
            "retry_reason": "",
            "payload": payload,
        }
        with self._lock:
            self.pending[envelope["envelope_id"]] = envelope
        self._call(self._send_pending())
        return None

    def post_signed(
        self,
        payload: JSON,
        *,
        interactive: bool = False,
        secret: str = SIGNING_SECRET,
        timestamp: int | None = None,
        retry: int = 0,
    ) -> int:
        assert self.http_target, "set http_target to the daemon's Events API URL"
        if interactive:
            body = urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()
            kind = "application/x-www-form-urlencoded"
        else:
            body, kind = json.dumps(payload).encode(), "application/json"
        stamp = str(int(time.time()) if timestamp is None else timestamp)
        digest = hmac.new(secret.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256)
        headers = {
            "Content-Type": kind,
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": "v0=" + digest.hexdigest(),
        }
        if retry:
            headers |= {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"}
        request = urllib.request.Request(self.http_target, body, headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    def send_raw(self, frame: Any) -> None:
        """Socket Mode: send ``frame`` (any JSON value) as it is on the newest connection,
        once: an envelope no real Slack would send, to see that the app survives it."""
        self._call(self._send_raw(frame))

    async def _send_raw(self, frame: Any) -> None:
        live = [ws for _, ws, _ in self._sockets if not ws.closed]
        assert live, "no Socket Mode connection to send on"
        await live[-1].send_str(json.dumps(frame))

    def post_signed_bytes(self, body: bytes, content_type: str = "application/json") -> int:
        """HTTP: POST ``body`` as it is, correctly signed; returns the HTTP status."""
        assert self.http_target, "set http_target to the daemon's Events API URL"
        stamp = str(int(time.time()))
        digest = hmac.new(SIGNING_SECRET.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256)
        headers = {
            "Content-Type": content_type,
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": "v0=" + digest.hexdigest(),
        }
        request = urllib.request.Request(self.http_target, body, headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    def drop_sockets(self) -> None:
        """The network blinks: every Socket Mode connection is cut."""
        self._call(self._close_sockets())

    def wait_connected(self, count: int = 1, timeout: float = 60) -> None:
        self.wait_until(lambda: self.hellos >= count, timeout, f"{count} Socket Mode hello(s)")

    def release(self) -> None:
        self._release.set()

    # ----- lifecycle --------------------------------------------------------------------
    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._serve(sock))
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="fake-slack", daemon=True)
        self._thread.start()
        assert ready.wait(10)

    def stop(self) -> None:
        if self._loop is None:
            return
        self._release.set()
        self._call(self._close_sockets())
        if self._runner is not None:
            self._call(self._runner.cleanup())
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(10)
        self._loop = None

    def _call(self, coroutine: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(30)

    async def _serve(self, sock: socket.socket) -> None:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/link", self._socket_mode)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_get("/files-pri/{file_id}/{name}", self._download)
        app.router.add_get("/redirect", self._redirect)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()

    # ----- internals ----------------------------------------------------------------------
    def _next_ts(self) -> str:
        self._last_ts = max(time.time(), self._last_ts + 0.0001)
        return f"{self._last_ts:.6f}"

    def _store_file(self, name: str, data: bytes, user: str) -> JSON:
        file_id = f"F{next(self._ids):08d}"
        info = {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": "text/plain",
            "size": len(data),
            "user": user,
            "mode": "hosted",
            "url_private": f"http://127.0.0.1:{self._port}/files-pri/{file_id}/{name}",
        }
        info["url_private_download"] = info["url_private"]
        self.files[file_id] = dict(info, content=data)
        return info

    def _remote_file(self, name: str, url: str, user: str) -> JSON:
        return {
            "id": f"F{next(self._ids):08d}",
            "name": name,
            "title": name,
            "mimetype": "text/plain",
            "size": 10,
            "user": user,
            "mode": "external",
            "is_external": True,
            "external_type": "app",
            "url_private": url,
            "url_private_download": url,
        }

    def redirect_url(self, target: str) -> str:
        """A link on the fake Slack's own host that answers 302 to ``target``."""
        return f"http://127.0.0.1:{self._port}/redirect?" + urllib.parse.urlencode({"to": target})

    async def _redirect(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["to"])

    def _post(self, channel: str, **fields: Any) -> JSON:
        message = {
            "type": "message",
            "user": BOT_USER,
            "bot_id": BOT_ID,
            "ts": self._next_ts(),
            "channel": channel,
            "history": [],
            **fields,
        }
        self.messages.setdefault(channel, []).append(message)
        self._lock.notify_all()
        return message

    async def _send_pending(self) -> None:
        """Send every unacked envelope not yet sent on the newest connection; one sent on an
        older connection goes again as a retry, as Slack redelivers unacknowledged events."""
        live = [(number, ws, request) for number, ws, request in self._sockets if not ws.closed]
        if not live:
            return
        number, ws, _ = live[-1]
        with self._lock:
            envelopes = [e for e in self.pending.values() if e.get("sent_on") != number]
            for envelope in envelopes:
                if envelope.get("sent_on") is not None:
                    envelope["retry_attempt"] += 1
                    envelope["retry_reason"] = "timeout"
                envelope["sent_on"] = number
        for envelope in envelopes:
            try:
                await ws.send_json({k: v for k, v in envelope.items() if k != "sent_on"})
            except ConnectionError:
                return

    async def _close_sockets(self) -> None:
        """Cut the TCP connections without a close handshake, like a network failure."""
        for _, ws, request in list(self._sockets):
            if request.transport is not None:
                request.transport.abort()
            else:
                await ws.close()
        self._sockets.clear()

    async def _socket_mode(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._sockets.append((next(self._ids), ws, request))
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": len(self._sockets),
                "connection_info": {"app_id": "A0APP"},
            }
        )
        with self._lock:
            self.hellos += 1
            self._lock.notify_all()
        await self._send_pending()
        async for frame in ws:
            if frame.type is WSMsgType.TEXT:
                ack = json.loads(frame.data)
                with self._lock:
                    self.acks.append(ack["envelope_id"])
                    self.pending.pop(ack["envelope_id"], None)
                    self._lock.notify_all()
        return ws

    async def _upload(self, request: web.Request) -> web.Response:
        data = await request.read()
        with self._lock:
            self.files[request.match_info["file_id"]]["content"] = data
        return web.Response(text=f"OK - {len(data)}")

    async def _download(self, request: web.Request) -> web.Response:
        with self._lock:
            info = self.files.get(request.match_info["file_id"])
        if request.headers.get("Authorization") != f"Bearer {BOT_TOKEN}" or info is None:
            return web.Response(text="<html>Sign in to Slack</html>", content_type="text/html")
        return web.Response(body=info["content"], content_type="application/octet-stream")

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args: JSON = dict(request.query)
        if request.content_type == "application/json":
            args |= await request.json()
        elif request.can_read_body:
            args |= dict(await request.post())
        for key in ("blocks", "metadata", "files"):
            if isinstance(args.get(key), str):
                args[key] = json.loads(args[key])
        token = request.headers.get("Authorization", "").removeprefix("Bearer ") or args.get(
            "token"
        )
        with self._lock:
            self.calls.append((method, args))
        handler = getattr(self, "_m_" + method.replace(".", "_"), None)
        if handler is None:
            return web.json_response({"ok": False, "error": "unknown_method"}, status=404)
        wanted = APP_TOKEN if method == "apps.connections.open" else BOT_TOKEN
        if token != wanted:
            return web.json_response({"ok": False, "error": "invalid_auth"})
        if (
            method == "chat.postMessage"
            and self.hold_post
            and self.hold_post in args.get("text", "")
        ):
            return await self._held_post(request, args)
        with self._lock:
            result = handler(args)
        if not isinstance(result, dict):  # a malformed answer a test asked for
            return web.json_response(result)
        return web.json_response({"ok": "error" not in result, **result})

    async def _held_post(self, request: web.Request, args: JSON) -> web.Response:
        """Post, then keep the answer back until release() or the caller hangs up: lets a
        test kill the daemon inside the call, after Slack has the message."""
        with self._lock:
            result = self._m_chat_postMessage(args)
            self.hold_post = None
        self.held.set()
        while not self._release.is_set():
            if request.transport is None or request.transport.is_closing():
                break
            await asyncio.sleep(0.02)
        return web.json_response({"ok": True, **result})

    # ----- Web API methods (called with the lock held) ------------------------------------
    def _m_auth_test(self, args: JSON) -> JSON:
        return {
            "url": "https://fake.slack.test/",
            "team": "Fake",
            "user": "gateway",
            "team_id": TEAM,
            "user_id": BOT_USER,
            "bot_id": BOT_ID,
        }

    def _m_apps_connections_open(self, args: JSON) -> Any:
        self.connections_opened += 1
        if self.connection_answers:
            return self.connection_answers.pop(0)
        if self.connection_error:
            return {"error": self.connection_error}
        return {"url": f"ws://127.0.0.1:{self._port}/link?ticket={next(self._ids)}"}

    def _m_chat_postMessage(self, args: JSON) -> JSON:
        channel = args.get("channel", "")
        if channel not in self.channels:
            return {"error": "channel_not_found"}
        fields = {k: args[k] for k in ("text", "thread_ts", "blocks", "metadata") if args.get(k)}
        message = self._post(channel, **fields)
        return {"channel": channel, "ts": message["ts"], "message": message}

    def _m_chat_update(self, args: JSON) -> JSON:
        channel, ts = args.get("channel", ""), args.get("ts", "")
        found = [m for m in self.messages.get(channel, []) if m["ts"] == ts]
        if not found:
            return {"error": "message_not_found"}
        if found[0].get("user") != BOT_USER:
            return {"error": "cant_update_message"}
        message = found[0]
        message["history"].append({"text": message.get("text"), "blocks": message.get("blocks")})
        message["text"] = args.get("text", "")
        if "blocks" in args:
            message["blocks"] = args["blocks"]
        message["edited"] = {"user": BOT_USER, "ts": self._next_ts()}
        self._lock.notify_all()
        return {"channel": channel, "ts": ts, "text": message["text"]}

    def _m_conversations_replies(self, args: JSON) -> JSON:
        root = args.get("ts", "")
        found = [
            m
            for m in self.messages.get(args.get("channel", ""), [])
            if m["ts"] == root or m.get("thread_ts") == root
        ]
        if not found:
            return {"error": "thread_not_found"}
        return self._page(found, args)

    def _m_conversations_history(self, args: JSON) -> JSON:
        top = [
            m
            for m in self.messages.get(args.get("channel", ""), [])
            if m.get("thread_ts") in (None, m["ts"])
        ]
        return self._page(list(reversed(top)), args)

    def _page(self, messages: list[JSON], args: JSON) -> JSON:
        oldest = float(args.get("oldest") or 0)
        messages = [m for m in messages if float(m["ts"]) > oldest]
        start, limit = int(args.get("cursor") or 0), int(args.get("limit") or 100)
        page = messages[start : start + limit]
        shown = []
        for message in page:
            copy = {k: v for k, v in message.items() if k not in ("history", "channel")}
            if str(args.get("include_all_metadata")).lower() not in ("true", "1"):
                copy.pop("metadata", None)
            shown.append(copy)
        more = start + limit < len(messages)
        return {
            "messages": shown,
            "has_more": more,
            "response_metadata": {"next_cursor": str(start + limit) if more else ""},
        }

    def _m_conversations_info(self, args: JSON) -> JSON:
        channel = self.channels.get(args.get("channel", ""))
        return {"channel": channel} if channel else {"error": "channel_not_found"}

    def _m_conversations_join(self, args: JSON) -> JSON:
        channel = self.channels.get(args.get("channel", ""))
        if channel is None:
            return {"error": "channel_not_found"}
        warning = "already_in_channel" if channel["id"] in self.bot_in else None
        self.bot_in.add(channel["id"])
        return {"channel": channel, **({"warning": warning} if warning else {})}

    def _m_conversations_leave(self, args: JSON) -> JSON:
        if args.get("channel", "") not in self.bot_in:
            return {"error": "not_in_channel"}
        self.bot_in.discard(args["channel"])
        self._lock.notify_all()
        return {}

    def _m_users_info(self, args: JSON) -> JSON:
        user = self.users.get(args.get("user", ""))
        return {"user": user} if user else {"error": "user_not_found"}

    def _m_usergroups_users_list(self, args: JSON) -> JSON:
        users = self.usergroups.get(args.get("usergroup", ""))
        return {"users": users} if users is not None else {"error": "no_such_subteam"}

    def _m_files_getUploadURLExternal(self, args: JSON) -> JSON:
        file_id = f"F{next(self._ids):08d}"
        name = str(args.get("filename", "file"))
        self.files[file_id] = {
            "id": file_id,
            "name": name,
            "title": name,
            "size": int(args.get("length", 0)),
            "content": None,
        }
        return {"upload_url": f"http://127.0.0.1:{self._port}/upload/{file_id}", "file_id": file_id}

    def _m_files_completeUploadExternal(self, args: JSON) -> JSON:
        shared = []
        for entry in args.get("files") or []:
            info = self.files.get(entry["id"])
            if info is None or info["content"] is None:
                return {"error": "file_not_found"}
            info["title"] = entry.get("title") or info["name"]
            shared.append({k: v for k, v in info.items() if k != "content"})
        channel = args.get("channel_id")
        if channel:
            fields = {"files": shared, "text": args.get("initial_comment") or ""}
            if args.get("thread_ts"):
                fields["thread_ts"] = args["thread_ts"]
            self._post(channel, **fields)
        return {"files": shared}


def file_content(fake: FakeSlack, file_id: str) -> bytes:
    with fake._lock:
        return bytes(fake.files[file_id]["content"])


@pytest.fixture(scope="session")
def fake_slack_server() -> Iterator[FakeSlack]:
    server = FakeSlack()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fake_slack(fake_slack_server: FakeSlack) -> Iterator[FakeSlack]:
    fake_slack_server.drop_sockets()
    fake_slack_server.reset()
    yield fake_slack_server
    fake_slack_server.release()
    fake_slack_server.drop_sockets()
