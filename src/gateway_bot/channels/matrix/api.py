"""A small typed client for the few Matrix client-server API calls the channel makes.

Why not matrix-nio's AsyncClient for the bot: the channel stores raw event JSON (it is the
RawMessage payload and must survive restarts), while nio re-parses events and drops what it
does not model (the content of invite member events, for one), retries connection errors
forever by default (the channel must notice and report them), and ships no type hints. A
dozen endpoints over aiohttp are simpler to reason about. The tests drive the human with nio.

Every failure is a MatrixError, connection problems included (status 0), so callers handle
one exception type; rate limits (429) are waited out here, a few times, as the server asks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlparse

import aiohttp

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]

_CLIENT = "/_matrix/client/v3"
_MEDIA = "/_matrix/client/v1/media"
_MEDIA_UPLOAD = "/_matrix/media/v3/upload"
_RATE_LIMIT_RETRIES = 5


class MatrixError(Exception):
    """The homeserver refused a request, or could not be reached (``status`` 0)."""

    def __init__(self, status: int, errcode: str, error: str) -> None:
        super().__init__(f"{errcode} ({status}): {error}" if status else error)
        self.status = status
        self.errcode = errcode
        self.error = error

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


def _segment(value: str) -> str:
    return quote(value, safe="")


class MatrixApi:
    def __init__(self, homeserver: str) -> None:
        self._base = homeserver.rstrip("/")
        self.access_token: str | None = None
        self._session: aiohttp.ClientSession | None = None
        self._in_flight = 0
        self._retired = False

    # -- sessions ------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _client(self) -> AsyncIterator[aiohttp.ClientSession]:
        """The shared session, or after ``retire`` a short-lived one: the daemon keeps
        sending replies after its listeners stopped, and has no hook to close channels."""
        if self._retired:
            async with aiohttp.ClientSession() as temporary:
                yield temporary
            return
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        self._in_flight += 1
        try:
            yield self._session
        finally:
            self._in_flight -= 1
            if self._retired and self._in_flight == 0:
                await self._session.close()

    async def retire(self) -> None:
        """Close the shared session once no request uses it; later calls still work."""
        self._retired = True
        if self._session is not None and self._in_flight == 0:
            await self._session.close()

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.access_token}"} if self.access_token else {}
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    # -- the request loop ----------------------------------------------------------------

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
        url = self._base + path
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        for attempt in range(_RATE_LIMIT_RETRIES + 1):
            try:
                async with (
                    self._client() as session,
                    session.request(
                        method,
                        url,
                        params=params,
                        json=body,
                        data=data,
                        headers=self._headers(content_type),
                        timeout=timeout,
                    ) as response,
                ):
                    payload = await _json_of(response)
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise MatrixError(0, "M_CONNECTION", f"{method} {path}: {exc!r}") from exc
            if response.status < 400:
                return payload
            errcode = str(payload.get("errcode", "M_UNKNOWN"))
            error = MatrixError(response.status, errcode, str(payload.get("error", "")))
            if response.status != 429 or attempt == _RATE_LIMIT_RETRIES:
                raise error
            wait_ms = payload.get("retry_after_ms") or 1000
            log.warning("rate limited on %s %s; waiting %d ms", method, path, wait_ms)
            await asyncio.sleep(float(wait_ms) / 1000)
        raise AssertionError("unreachable")

    # -- account -------------------------------------------------------------------------

    async def login_password(self, user_id: str, password: str, device_name: str) -> Login:
        body = {
            "type": "m.login.password",
            "identifier": {"type": "m.id.user", "user": user_id},
            "password": password,
            "initial_device_display_name": device_name,
        }
        answer = await self.call("POST", f"{_CLIENT}/login", body=body)
        return Login(str(answer["user_id"]), str(answer["device_id"]), str(answer["access_token"]))

    async def whoami(self) -> tuple[str, str | None]:
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

    async def sync(self, since: str | None, timeout_ms: int, filter_json: str) -> JsonDict:
        params = {"timeout": str(timeout_ms), "filter": filter_json}
        if since:
            params["since"] = since
        return await self.call(
            "GET", f"{_CLIENT}/sync", params=params, timeout_s=timeout_ms / 1000 + 30
        )

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

    async def send(self, room_id: str, event_type: str, content: JsonDict, txn_id: str) -> str:
        """Send an event. The homeserver answers a repeated ``txn_id`` (same device) with
        the first event's id instead of sending again: re-sends after a crash are safe."""
        path = f"{_CLIENT}/rooms/{_segment(room_id)}/send/{_segment(event_type)}/{_segment(txn_id)}"
        answer = await self.call("PUT", path, body=content)
        return str(answer["event_id"])

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
            params={"filename": filename},
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
        parsed = urlparse(mxc)
        if parsed.scheme != "mxc" or not parsed.netloc or not parsed.path.strip("/"):
            raise MatrixError(400, "M_INVALID_PARAM", f"not an mxc:// URI: {mxc!r}")
        url = f"{self._base}{_MEDIA}/download/{_segment(parsed.netloc)}/"
        url += _segment(parsed.path.strip("/"))
        size = 0
        try:
            async with (
                self._client() as session,
                session.get(
                    url, headers=self._headers(), timeout=aiohttp.ClientTimeout(sock_read=120)
                ) as response,
            ):
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
