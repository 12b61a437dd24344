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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from nio import (
    AsyncClient,
    AsyncClientConfig,
    LoginResponse,
    MessageDirection,
    RoomCreateResponse,
    RoomMessagesResponse,
    RoomPreset,
)
from nio.api import Api
from nio.crypto.attachments import decrypt_attachment, encrypt_attachment

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


DECRYPTED = "test.decrypted"
"""Set on an event a Human saw: it arrived encrypted and their client decrypted it."""


def _as_seen(event: Any) -> Event:
    source = dict(event.source)
    if getattr(event, "decrypted", False):
        source[DECRYPTED] = True
    return source


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
    matches; ``history`` reads the room's whole timeline, the ground truth for counting.

    With ``store`` the client does end-to-end encryption as Element would (its own crypto
    store, key upload/query/claim after every sync, keys shared with every device of the
    room): what it sees is decrypted, what it sends into an encrypted room is encrypted."""

    def __init__(
        self, server: SynapseServer, account: MatrixAccount, store: Path | None = None
    ) -> None:
        self.server = server
        self.account = account
        self.user_id = account.user_id
        if store is not None:
            store.mkdir(parents=True, exist_ok=True)
            config = AsyncClientConfig(encryption_enabled=True, max_timeouts=3)
            self.client = AsyncClient(
                server.base_url, account.user_id, store_path=str(store), config=config
            )
        else:
            self.client = AsyncClient(server.base_url, account.user_id)
        self.client.restore_login(account.user_id, account.device_id, account.access_token)
        self.seen: dict[str, list[Event]] = {}
        self.typing: dict[str, list[list[str]]] = {}
        self._since: str | None = None

    async def close(self) -> None:
        await self.client.close()

    @property
    def device_id(self) -> str:
        return str(self.client.device_id)

    async def key_chores(self) -> None:
        """What nio's sync_forever does between syncs: keys up, devices queried, one-time
        keys claimed, queued to-device messages (key requests and forwards) sent."""
        client = self.client
        if client.olm is None:
            return
        if client.should_upload_keys:
            await client.keys_upload()
        if client.should_query_keys:
            await client.keys_query()
        if client.should_claim_keys:
            await client.keys_claim(client.get_users_for_key_claiming())
        await client.send_to_device_messages()

    async def sync(self, timeout_ms: int = 1000) -> None:
        await self.key_chores()
        answer = await self.client.sync(timeout=timeout_ms, since=self._since)
        self._since = getattr(answer, "next_batch", None) or self._since
        await self.key_chores()
        rooms = getattr(answer, "rooms", None)
        if rooms is None:
            await asyncio.sleep(0.2)
            return
        for room_id, info in rooms.join.items():
            self.seen.setdefault(room_id, []).extend(_as_seen(e) for e in info.timeline.events)
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
            events.extend(_as_seen(e) for e in page.chunk)
            if not page.chunk or not page.end:
                break
            token = page.end
        return list(reversed(events))

    async def create_room(
        self,
        invite: list[str],
        *,
        name: str | None = None,
        encrypted: bool = False,
        direct: bool = False,
    ) -> str:
        """``encrypted`` puts ``m.room.encryption`` in the initial state and ``direct``
        makes a trusted private chat flagged as direct: what Element does for a DM."""
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
        answer = await self.client.room_create(
            name=name,
            invite=invite,
            initial_state=state,
            is_direct=direct,
            preset=RoomPreset.trusted_private_chat if direct else None,
        )
        assert isinstance(answer, RoomCreateResponse), answer
        await self.sync(0)
        return str(answer.room_id)

    async def join(self, room_id: str) -> None:
        await self.client.join(room_id)

    async def leave(self, room_id: str) -> None:
        await self.client.room_leave(room_id)

    async def send(self, room_id: str, event_type: str, content: dict[str, Any]) -> str:
        if self.client.olm is not None:
            if room_id not in self.client.rooms:
                await self.sync(0)  # nio encrypts only for rooms it has synced
            await self.key_chores()
        answer = await self.client.room_send(
            room_id, event_type, content, ignore_unverified_devices=True
        )
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

    async def send_encrypted_file(
        self, room_id: str, filename: str, data: bytes, caption: str | None = None
    ) -> str:
        """A file as Element sends it into an encrypted room: the ciphertext uploaded, the
        key in the (encrypted) message's ``file`` object."""
        ciphertext, keys = encrypt_attachment(data)
        upload, _ = await self.client.upload(
            lambda *_: ciphertext,
            content_type="application/octet-stream",
            filesize=len(ciphertext),
        )
        uri = getattr(upload, "content_uri", None)
        assert uri, upload
        content = {
            "msgtype": "m.file",
            "body": caption or filename,
            "filename": filename,
            "file": {"url": uri, "mimetype": "text/plain", **keys},
            "info": {"size": len(data), "mimetype": "text/plain"},
        }
        return await self.send(room_id, "m.room.message", content)

    async def download_encrypted(self, file_info: dict[str, Any]) -> bytes:
        """Fetch and decrypt an encrypted attachment (checks its hash)."""
        ciphertext = await self.download(str(file_info["url"]))
        return bytes(
            decrypt_attachment(
                ciphertext, file_info["key"]["k"], file_info["hashes"]["sha256"], file_info["iv"]
            )
        )

    async def _send_encrypted(self, room_id: str, event_type: str, content: dict[str, Any]) -> str:
        """Encrypt with the room's current outbound session and send, nothing shared."""
        client = self.client
        encrypted_type, encrypted = client.encrypt(room_id, event_type, content)
        method, path, data = Api.room_send(
            client.access_token, room_id, encrypted_type, encrypted, uuid.uuid4()
        )
        answer = await client.send(method, path, data, {"Content-Type": "application/json"})
        body = await answer.json()
        assert answer.status == 200, body
        return str(body["event_id"])

    async def react_encrypted(self, room_id: str, event_id: str, key: str) -> str:
        """A reaction as Element sends it in an encrypted room: encrypted (nio's own
        ``room_send`` leaves reactions plain)."""
        await self.say(room_id, "(reacting)")  # makes sure a session is shared
        content = {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}
        return await self._send_encrypted(room_id, "m.reaction", content)

    async def say_keys_later(
        self, room_id: str, text: str
    ) -> tuple[str, Callable[[], Awaitable[None]]]:
        """Send ``text`` encrypted with a fresh Megolm session whose key goes out only when
        the returned ``deliver`` is awaited: a key that arrives late, or never."""
        client = self.client
        olm = client.olm
        assert olm is not None
        await self.key_chores()
        if not client.rooms[room_id].members_synced:
            await client.joined_members(room_id)
        if client.should_query_keys:
            await client.keys_query()
        olm.create_outbound_group_session(room_id)
        missing = client.get_missing_sessions(room_id)
        if missing:
            await client.keys_claim(missing)
        held = list(
            olm.share_group_session_parallel(
                room_id, list(client.rooms[room_id].users), ignore_unverified_devices=True
            )
        )
        olm.outbound_group_sessions[room_id].shared = True
        event_id = await self._send_encrypted(
            room_id, "m.room.message", {"msgtype": "m.text", "body": text}
        )
        # The next message starts a session that is shared as usual.
        olm.outbound_group_sessions.pop(room_id)

        async def deliver() -> None:
            for _, to_device in held:
                method, path, data = Api.to_device(
                    client.access_token, "m.room.encrypted", to_device, uuid.uuid4()
                )
                answer = await client.send(method, path, data, {"Content-Type": "application/json"})
                assert answer.status == 200, await answer.text()

        return event_id, deliver

    def rotate_megolm_session(self, room_id: str) -> str | None:
        """Start a new outbound Megolm session for the room (as a client does after N
        messages or a member change); returns the old session's id."""
        olm = self.client.olm
        assert olm is not None
        old = olm.outbound_group_sessions.pop(room_id, None)
        return None if old is None else str(old.id)

    async def new_device(self, store: Path) -> Human:
        """The same person signing in on another device (its own crypto store)."""
        signing_in = AsyncClient(self.server.base_url, self.user_id)
        try:
            login = await signing_in.login(self.account.password, device_name="second device")
        finally:
            await signing_in.close()
        assert isinstance(login, LoginResponse), login
        account = MatrixAccount(
            self.user_id, self.account.password, login.access_token, login.device_id
        )
        other = Human(self.server, account, store)
        await other.sync(0)
        return other


@pytest.fixture
async def meet(synapse: SynapseServer) -> AsyncIterator[Callable[..., Any]]:
    """``await meet("alice")``: a fresh account and its client, closed after the test;
    ``meet("alice", e2ee=True)``: one whose client encrypts (its own crypto store)."""
    people: list[Human] = []

    async def make(prefix: str, *, e2ee: bool = False) -> Human:
        account = await synapse.register(prefix)
        store = synapse.directory / "humans" / account.device_id if e2ee else None
        person = Human(synapse, account, store)
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
