"""A real Synapse homeserver on 127.0.0.1 (one per test session, sqlite, no federation) and
a human at a Matrix client (matrix-nio) who sees exactly what the bot sends.

Each test registers fresh accounts and makes fresh rooms, so tests share the server but
never each other's state. Registration uses the open ``m.login.dummy`` flow the static
config enables; every rate limit is lifted so a test never waits on one.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from nio import AsyncClient, MessageDirection, RoomCreateResponse, RoomMessagesResponse

Event = dict[str, Any]

_UNLIMITED = {"per_second": 10000, "burst_count": 10000}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class MatrixAccount:
    user_id: str
    password: str
    access_token: str
    device_id: str


class SynapseServer:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self._names = itertools.count(1)

    def _write_config(self) -> Path:
        from signedjson.key import generate_signing_key, write_signing_keys

        d = self.directory
        d.mkdir(parents=True, exist_ok=True)
        with (d / "signing.key").open("w") as key_file:
            write_signing_keys(key_file, [generate_signing_key("a_test")])
        logging = {
            "version": 1,
            "formatters": {"plain": {"format": "%(asctime)s %(name)s %(levelname)s %(message)s"}},
            "handlers": {
                "file": {
                    "class": "logging.FileHandler",
                    "formatter": "plain",
                    "filename": str(d / "homeserver.log"),
                }
            },
            "root": {"level": "WARNING", "handlers": ["file"]},
            "disable_existing_loggers": False,
        }
        (d / "log.yaml").write_text(yaml.safe_dump(logging))
        rate = {"address": _UNLIMITED, "account": _UNLIMITED, "failed_attempts": _UNLIMITED}
        per_local_remote = {"local": _UNLIMITED, "remote": _UNLIMITED}
        config = {
            "server_name": "localhost",
            "pid_file": str(d / "homeserver.pid"),
            "listeners": [
                {
                    "port": self.port,
                    "bind_addresses": ["127.0.0.1"],
                    "type": "http",
                    "tls": False,
                    "x_forwarded": False,
                    "resources": [{"names": ["client"], "compress": False}],
                }
            ],
            "database": {"name": "sqlite3", "args": {"database": str(d / "homeserver.db")}},
            "log_config": str(d / "log.yaml"),
            "media_store_path": str(d / "media"),
            "signing_key_path": str(d / "signing.key"),
            "registration_shared_secret": "gateway-bot-tests",
            "macaroon_secret_key": "gateway-bot-tests-macaroon",
            "form_secret": "gateway-bot-tests-form",
            "report_stats": False,
            "trusted_key_servers": [],
            "suppress_key_server_warning": True,
            "federation_domain_whitelist": [],
            "url_preview_enabled": False,
            "enable_registration": True,
            "enable_registration_without_verification": True,
            "presence": {"enabled": False},
            "max_upload_size": "10M",
            "rc_message": _UNLIMITED,
            "rc_registration": _UNLIMITED,
            "rc_login": rate,
            "rc_joins": per_local_remote,
            "rc_joins_per_room": _UNLIMITED,
            "rc_invites": {
                "per_room": _UNLIMITED,
                "per_user": _UNLIMITED,
                "per_issuer": _UNLIMITED,
            },
            "rc_room_creation": _UNLIMITED,
        }
        path = d / "homeserver.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    def start(self) -> None:
        config = self._write_config()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "synapse.app.homeserver", "-c", str(config)],
            stdout=(self.directory / "stdout.log").open("wb"),
            stderr=subprocess.STDOUT,
            cwd=self.directory,
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"synapse exited: {(self.directory / 'stdout.log').read_text()}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/health", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("synapse did not become healthy within 90 s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(15)

    async def register(self, prefix: str) -> MatrixAccount:
        """A fresh account (unique name) with a password and a logged-in device."""
        name = f"{prefix}{next(self._names)}x{uuid.uuid4().hex[:6]}"
        password = f"pw-{uuid.uuid4().hex}"
        body = {"username": name, "password": password, "auth": {"type": "m.login.dummy"}}
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{self.base_url}/_matrix/client/v3/register", json=body) as answer,
        ):
            data = await answer.json()
        assert answer.status == 200, data
        return MatrixAccount(data["user_id"], password, data["access_token"], data["device_id"])


@pytest.fixture(scope="session")
def synapse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SynapseServer]:
    server = SynapseServer(tmp_path_factory.mktemp("synapse"))
    server.start()
    yield server
    server.stop()


def content_of(event: Event) -> dict[str, Any]:
    """What a client shows: the latest text of an edit, the content otherwise."""
    content = event.get("content") or {}
    new = content.get("m.new_content")
    return new if isinstance(new, dict) else content


def relation_of(event: Event) -> dict[str, Any]:
    relates = (event.get("content") or {}).get("m.relates_to")
    return relates if isinstance(relates, dict) else {}


class Human:
    """A person at a Matrix client. ``wait_for`` syncs until an event they would see
    matches; ``history`` reads the room's whole timeline, the ground truth for counting."""

    def __init__(self, server: SynapseServer, account: MatrixAccount) -> None:
        self.server = server
        self.account = account
        self.user_id = account.user_id
        self.client = AsyncClient(server.base_url, account.user_id)
        self.client.restore_login(account.user_id, account.device_id, account.access_token)
        self.seen: dict[str, list[Event]] = {}
        self.typing: dict[str, list[list[str]]] = {}
        self._since: str | None = None

    async def close(self) -> None:
        await self.client.close()

    async def sync(self, timeout_ms: int = 1000) -> None:
        answer = await self.client.sync(timeout=timeout_ms, since=self._since)
        self._since = getattr(answer, "next_batch", None) or self._since
        rooms = getattr(answer, "rooms", None)
        if rooms is None:
            await asyncio.sleep(0.2)
            return
        for room_id, info in rooms.join.items():
            self.seen.setdefault(room_id, []).extend(e.source for e in info.timeline.events)
            for ephemeral in info.ephemeral:
                users = getattr(ephemeral, "users", None)
                if users is not None:
                    self.typing.setdefault(room_id, []).append(list(users))

    async def wait_for(
        self, room_id: str, matches: Callable[[Event], bool], within: float = 90
    ) -> Event:
        deadline = time.monotonic() + within
        while True:
            for event in self.seen.get(room_id, []):
                if matches(event):
                    return event
            if time.monotonic() > deadline:
                shown = [
                    (e.get("sender"), e.get("type"), content_of(e).get("body"))
                    for e in self.seen.get(room_id, [])
                ]
                raise AssertionError(f"no matching event in {room_id}; saw {shown}")
            await self.sync()

    async def wait_typing(self, room_id: str, user_id: str, within: float = 60) -> None:
        deadline = time.monotonic() + within
        while not any(user_id in users for users in self.typing.get(room_id, [])):
            assert time.monotonic() < deadline, f"{user_id} never typed in {room_id}"
            await self.sync()

    async def history(self, room_id: str) -> list[Event]:
        """Every event of the room, oldest first, read with /messages."""
        events: list[Event] = []
        token = ""
        for _ in range(50):
            page = await self.client.room_messages(
                room_id, token, direction=MessageDirection.back, limit=100
            )
            assert isinstance(page, RoomMessagesResponse), page
            events.extend(e.source for e in page.chunk)
            if not page.chunk or not page.end:
                break
            token = page.end
        return list(reversed(events))

    async def create_room(
        self, invite: list[str], *, name: str | None = None, encrypted: bool = False
    ) -> str:
        state = (
            [
                {
                    "type": "m.room.encryption",
                    "state_key": "",
                    "content": {"algorithm": "m.megolm.v1.aes-sha2"},
                }
            ]
            if encrypted
            else []
        )
        answer = await self.client.room_create(name=name, invite=invite, initial_state=state)
        assert isinstance(answer, RoomCreateResponse), answer
        await self.sync(0)
        return str(answer.room_id)

    async def join(self, room_id: str) -> None:
        await self.client.join(room_id)

    async def leave(self, room_id: str) -> None:
        await self.client.room_leave(room_id)

    async def send(self, room_id: str, event_type: str, content: dict[str, Any]) -> str:
        answer = await self.client.room_send(room_id, event_type, content)
        event_id = getattr(answer, "event_id", None)
        assert event_id, answer
        return str(event_id)

    async def say(
        self, room_id: str, text: str, *, mention: str | None = None, thread: str | None = None
    ) -> str:
        """Send a text message; ``mention`` adds the bot to ``m.mentions`` as clients do
        when you pick a name from the completion list."""
        content: dict[str, Any] = {"msgtype": "m.text", "body": text}
        if mention:
            content["m.mentions"] = {"user_ids": [mention]}
        if thread:
            content["m.relates_to"] = {
                "rel_type": "m.thread",
                "event_id": thread,
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": thread},
            }
        return await self.send(room_id, "m.room.message", content)

    async def send_file(
        self, room_id: str, filename: str, data: bytes, caption: str | None = None
    ) -> str:
        upload, _ = await self.client.upload(
            lambda *_: data, content_type="text/plain", filename=filename, filesize=len(data)
        )
        uri = getattr(upload, "content_uri", None)
        assert uri, upload
        content = {
            "msgtype": "m.file",
            "body": caption or filename,
            "filename": filename,
            "url": uri,
            "info": {"size": len(data), "mimetype": "text/plain"},
        }
        return await self.send(room_id, "m.room.message", content)

    async def download(self, mxc: str) -> bytes:
        answer = await self.client.download(mxc=mxc)
        body = getattr(answer, "body", None)
        assert isinstance(body, bytes), answer
        return body


@pytest.fixture
async def meet(synapse: SynapseServer) -> AsyncIterator[Callable[..., Any]]:
    """``await meet("alice")``: a fresh account and its client, closed after the test."""
    people: list[Human] = []

    async def make(prefix: str) -> Human:
        person = Human(synapse, await synapse.register(prefix))
        await person.sync(0)
        people.append(person)
        return person

    yield make
    for person in people:
        await person.close()


def from_user(user_id: str) -> Callable[[Event], bool]:
    return lambda event: event.get("sender") == user_id


def bot_text(bot: str, pattern: str) -> Callable[[Event], bool]:
    """A message (not an edit) from ``bot`` whose body matches ``pattern``."""
    regex = re.compile(pattern, re.DOTALL)

    def matches(event: Event) -> bool:
        content = event.get("content") or {}
        return (
            event.get("sender") == bot
            and event.get("type") == "m.room.message"
            and relation_of(event).get("rel_type") != "m.replace"
            and bool(regex.search(str(content.get("body", ""))))
        )

    return matches


def bot_edit(bot: str, target: str, pattern: str) -> Callable[[Event], bool]:
    """An edit by ``bot`` of ``target`` whose new text matches ``pattern``."""
    regex = re.compile(pattern, re.DOTALL)
    return lambda event: (
        event.get("sender") == bot
        and relation_of(event).get("rel_type") == "m.replace"
        and relation_of(event).get("event_id") == target
        and bool(regex.search(str(content_of(event).get("body", ""))))
    )


def membership(user_id: str, state: str) -> Callable[[Event], bool]:
    return lambda event: (
        event.get("type") == "m.room.member"
        and event.get("state_key") == user_id
        and (event.get("content") or {}).get("membership") == state
    )


def matrix_config(
    directory: Path,
    repo: Path,
    api: Any,
    synapse: SynapseServer,
    bot: MatrixAccount,
    allowed: list[str],
    *,
    sections: dict[str, Any] | None = None,
    **matrix: Any,
) -> Path:
    """A daemon config with only the Matrix channel, the bot logging in by password;
    ``matrix`` adds channel settings, ``sections`` other top-level keys (``access``...)."""
    from tests.conftest import write_config

    settings = {
        "homeserver": synapse.base_url,
        "user_id": bot.user_id,
        "password": bot.password,
        "allowed_users": allowed,
        **matrix,
    }
    return write_config(
        directory,
        repo,
        api,
        channels={"console": None, "matrix": settings},
        sandbox={"kind": "none"},
        **(sections or {}),
    )
