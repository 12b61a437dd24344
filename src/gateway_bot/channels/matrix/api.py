"""The Matrix client-server calls the channel makes, over matrix-nio's ``AsyncClient``.

nio owns the transport (its aiohttp session), the login, the sync's side effects (room
state, device lists, to-device messages, decryption) and encryption of what is sent. Its
defaults retry connection errors and rate limits forever without telling anyone; here they
are capped (``max_timeouts=0``, a few 429 waits) so a failure reaches the channel, which
reports its health and leaves retrying to the core's one policy.

What nio does not model is read as JSON: the channel stores raw event JSON (the RawMessage
payload must survive restarts), so the sync keeps its raw body next to nio's parsed
response, and the few endpoints whose answer nio re-parses lossily (stripped invite state,
``/messages`` pages, single events, state lookups) go through ``call`` on nio's session.

Every failure is a MatrixError, connection problems included (status 0), so callers handle
one exception type.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote, urlencode

import aiohttp
from nio import (
    AsyncClient,
    AsyncClientConfig,
    ErrorResponse,
    LoginResponse,
    RoomSendResponse,
    SyncResponse,
)
from nio.api import Api
from nio.crypto import ENCRYPTION_ENABLED

log = logging.getLogger(__name__)
# nio logs every room event it handles at INFO; its warnings (undecryptable events, missing
# sessions) are the part an operator needs.
logging.getLogger("nio").setLevel(logging.WARNING)

JsonDict = dict[str, Any]

_CLIENT = "/_matrix/client/v3"
_MEDIA = "/_matrix/client/v1/media"
_MEDIA_UPLOAD = "/_matrix/media/v3/upload"
_RATE_LIMIT_RETRIES = 5


class MatrixError(Exception):
    """The homeserver refused a request, or could not be reached (``status`` 0)."""

    def __init__(self, status: int, errcode: str, error: str, body: JsonDict | None = None) -> None:
        super().__init__(f"{errcode} ({status}): {error}" if status else error)
        self.status = status
        self.errcode = errcode
        self.error = error
        self.body = body or {}
        """The error's JSON (an auth challenge's ``session`` and ``flows``)."""

    @property
    def transient(self) -> bool:
        """Worth retrying later: unreachable, overloaded, rate limited."""
        return self.status == 0 or self.status >= 500 or self.status == 429


class FileTooLarge(Exception):
    """A download passed the size limit; nothing was kept."""


@dataclass(frozen=True)
class Login:
    user_id: str
    device_id: str
    access_token: str


_MXC = re.compile(
    r"mxc://((?:[A-Za-z0-9-]+\.)*[A-Za-z0-9-]+(?::[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](?::[0-9]{1,5})?)"
    r"/([A-Za-z0-9_-]+)"
)
"""A content URI as the spec defines it: a server name and a media id of ``[A-Za-z0-9_-]``
(anything else, dot segments included, is refused before a request is made)."""


def _segment(value: str) -> str:
    return quote(value, safe="")


class _KeptSyncResponse(SyncResponse):  # type: ignore[misc]
    """nio's SyncResponse with the JSON it was parsed from (``raw``): nio keeps only what
    it models (stripped invite state loses its content, the timeline's ``unsigned``...)."""

    raw: JsonDict

    @classmethod
    def from_dict(cls, parsed_dict: dict[Any, Any]) -> Any:
        raw = copy.deepcopy(parsed_dict)  # nio's parsing pops keys out of the dict it reads
        response = SyncResponse.from_dict(parsed_dict)
        response.raw = raw
        return response


def new_client(homeserver: str, user_id: str, store_path: str, pickle_key: str) -> AsyncClient:
    """An AsyncClient that fails instead of retrying forever. ``store_path`` empty: no
    crypto store, so no encryption (rooms that need it are answered with a notice)."""
    config = AsyncClientConfig(
        max_limit_exceeded=_RATE_LIMIT_RETRIES,
        max_timeouts=0,
        request_timeout=60,
        encryption_enabled=bool(store_path) and ENCRYPTION_ENABLED,
        pickle_key=pickle_key,
        store_sync_tokens=False,  # the channel commits its own token (exactly-once intake)
    )
    return AsyncClient(homeserver, user_id, store_path=store_path or None, config=config)


def _error_of(response: Any, what: str) -> MatrixError:
    transport = getattr(response, "transport_response", None)
    status = int(getattr(transport, "status", 0) or 0)
    errcode = str(getattr(response, "status_code", None) or "M_UNKNOWN")
    return MatrixError(status or 500, errcode, f"{what}: {getattr(response, 'message', '')}")


class MatrixApi:
    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    @property
    def access_token(self) -> str | None:
        return self.client.access_token or None

    async def retire(self) -> None:
        """Close nio's session; nio opens a new one for any later call (the daemon keeps
        sending replies after its listeners stopped)."""
        await self.client.close()
        self.client.client_session = None

    # -- the raw request ---------------------------------------------------------------

    async def call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: JsonDict | None = None,
        data: bytes | None = None,
        content_type: str | None = None,
        timeout_s: float = 30.0,
    ) -> JsonDict:
        """One request on nio's session; JSON in, JSON out. Used where nio's parsed
        responses would lose what the channel stores or reads."""
        if params:
            path = f"{path}?{urlencode(params)}"
        headers = {"Content-Type": content_type or "application/json"}
        if self.client.access_token:
            headers["Authorization"] = f"Bearer {self.client.access_token}"
        payload: Any = (
            data if data is not None else (json.dumps(body) if body is not None else None)
        )
        try:
            response = await self.client.send(
                method, path, payload, headers, timeout=aiohttp.ClientTimeout(total=timeout_s)
            )
            answer = await _json_of(response)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise MatrixError(0, "M_CONNECTION", f"{method} {path}: {exc!r}") from exc
        if response.status < 400:
            return answer
        errcode = str(answer.get("errcode", "M_UNKNOWN"))
        raise MatrixError(response.status, errcode, str(answer.get("error", "")), answer)

    async def _nio(self, call: Awaitable[Any], what: str) -> Any:
        """Await a nio call; its ErrorResponse and connection errors become MatrixError."""
        try:
            response = await call
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise MatrixError(0, "M_CONNECTION", f"{what}: {exc!r}") from exc
        if isinstance(response, ErrorResponse):
            raise _error_of(response, what)
        return response

    # -- account -------------------------------------------------------------------------

    async def login_password(self, user_id: str, password: str, device_name: str) -> Login:
        self.client.user = user_id
        answer = await self._nio(
            self.client.login(password=password, device_name=device_name), "login"
        )
        assert isinstance(answer, LoginResponse)
        return Login(str(answer.user_id), str(answer.device_id), str(answer.access_token))

    async def whoami(self, access_token: str) -> tuple[str, str | None]:
        self.client.access_token = access_token
        answer = await self.call("GET", f"{_CLIENT}/account/whoami")
        device = answer.get("device_id")
        return str(answer["user_id"]), str(device) if device else None

    async def display_name(self, user_id: str) -> str | None:
        try:
            answer = await self.call("GET", f"{_CLIENT}/profile/{_segment(user_id)}/displayname")
        except MatrixError as exc:
            if exc.status == 404:
                return None
            raise
        name = answer.get("displayname")
        return str(name) if name else None

    # -- sync and rooms ------------------------------------------------------------------

    async def sync(
        self, since: str | None, timeout_ms: int, filter_json: str, full_state: bool
    ) -> tuple[JsonDict, SyncResponse]:
        """One /sync through nio (which decrypts, tracks devices and room state as a side
        effect), returning the raw body with nio's parsed response."""
        method, path = Api.sync(
            self.client.access_token,
            since=since,
            timeout=timeout_ms or None,
            filter=filter_json,
            full_state=full_state or None,
        )
        wait_s = timeout_ms / 1000 + 30
        answer = await self._nio(
            self.client._send(_KeptSyncResponse, method, path, timeout=wait_s), "sync"
        )
        return cast(JsonDict, answer.raw), cast(SyncResponse, answer)

    async def upload_filter(self, user_id: str, filter_json: str) -> str:
        """Store a sync filter on the homeserver; its id is what the syncs then name."""
        path = f"{_CLIENT}/user/{_segment(user_id)}/filter"
        answer = await self.call("POST", path, body=json.loads(filter_json))
        filter_id = answer.get("filter_id")
        if not isinstance(filter_id, str) or not filter_id:
            raise MatrixError(200, "M_BAD_JSON", f"no filter_id in {answer!r:.200}")
        return filter_id

    async def join(self, room_id: str) -> None:
        await self.call("POST", f"{_CLIENT}/join/{_segment(room_id)}", body={})

    async def leave(self, room_id: str, reason: str = "") -> None:
        body = {"reason": reason} if reason else {}
        await self.call("POST", f"{_CLIENT}/rooms/{_segment(room_id)}/leave", body=body)

    async def joined_members(self, room_id: str) -> dict[str, str]:
        """Joined members and their display names (the user id when they set none)."""
        answer = await self.call("GET", f"{_CLIENT}/rooms/{_segment(room_id)}/joined_members")
        joined = answer.get("joined", {})
        return {
            str(user): str((info or {}).get("display_name") or user)
            for user, info in joined.items()
        }

    async def state_event(self, room_id: str, event_type: str, state_key: str = "") -> JsonDict:
        """A state event's content; empty when the room has none."""
        path = f"{_CLIENT}/rooms/{_segment(room_id)}/state/{_segment(event_type)}"
        try:
            return await self.call("GET", f"{path}/{_segment(state_key)}")
        except MatrixError as exc:
            if exc.status == 404:
                return {}
            raise

    async def get_event(self, room_id: str, event_id: str) -> JsonDict:
        path = f"{_CLIENT}/rooms/{_segment(room_id)}/event/{_segment(event_id)}"
        return await self.call("GET", path)

    async def messages(
        self, room_id: str, from_token: str, to_token: str | None, limit: int
    ) -> JsonDict:
        """One page of the room's timeline, newest first, from ``from_token`` back to
        ``to_token`` (a sync token: the gap a limited sync timeline left)."""
        params = {"from": from_token, "dir": "b", "limit": str(limit)}
        if to_token:
            params["to"] = to_token
        path = f"{_CLIENT}/rooms/{_segment(room_id)}/messages"
        return await self.call("GET", path, params=params)

    async def send_raw(self, room_id: str, event_type: str, content: JsonDict, txn_id: str) -> str:
        """PUT an event as it is (already encrypted, or for a plain room). The homeserver
        answers a repeated ``txn_id`` (same device) with the first event's id instead of
        sending again: re-sends after a crash are safe."""
        method, path, data = Api.room_send(
            self.client.access_token, room_id, event_type, content, txn_id
        )
        answer = await self._nio(
            self.client._send(RoomSendResponse, method, path, data, (room_id,)), "send"
        )
        return str(answer.event_id)

    async def typing(self, room_id: str, user_id: str, typing: bool, timeout_ms: int) -> None:
        path = f"{_CLIENT}/rooms/{_segment(room_id)}/typing/{_segment(user_id)}"
        body: JsonDict = {"typing": typing}
        if typing:
            body["timeout"] = timeout_ms
        await self.call("PUT", path, body=body)

    # -- media ---------------------------------------------------------------------------

    async def upload(self, data: bytes, content_type: str, filename: str) -> str:
        answer = await self.call(
            "POST",
            _MEDIA_UPLOAD,
            params={"filename": filename} if filename else None,
            data=data,
            content_type=content_type,
            timeout_s=300,
        )
        return str(answer["content_uri"])

    async def download(
        self, mxc: str, write: Callable[[bytes], Awaitable[None]], max_bytes: int
    ) -> int:
        """Stream ``mxc`` to ``write``; FileTooLarge past ``max_bytes``, whatever size the
        sender claimed (the caller discards what was written)."""
        match = _MXC.fullmatch(mxc)
        if match is None:  # a sender's string: "mxc://../x" would leave the download path
            raise MatrixError(400, "M_INVALID_PARAM", f"not an mxc:// URI: {mxc[:200]!r}")
        path = f"{_MEDIA}/download/{_segment(match[1])}/{_segment(match[2])}"
        headers = {"Authorization": f"Bearer {self.client.access_token}"}
        size = 0
        try:
            response = await self.client.send(
                "GET", path, None, headers, timeout=aiohttp.ClientTimeout(sock_read=120)
            )
            async with response:
                if response.status >= 400:
                    payload = await _json_of(response)
                    raise MatrixError(
                        response.status,
                        str(payload.get("errcode", "M_UNKNOWN")),
                        str(payload.get("error", "")),
                    )
                async for chunk in response.content.iter_chunked(256 * 1024):
                    size += len(chunk)
                    if size > max_bytes:
                        raise FileTooLarge(mxc)
                    await write(chunk)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise MatrixError(0, "M_CONNECTION", f"download {mxc}: {exc!r}") from exc
        return size


async def _json_of(response: aiohttp.ClientResponse) -> JsonDict:
    try:
        payload = await response.json(content_type=None)
    except ValueError:
        text = await response.text()
        return {"errcode": "M_NOT_JSON", "error": text[:200]}
    return payload if isinstance(payload, dict) else {}
