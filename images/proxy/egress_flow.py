"""How the egress proxy keeps one conversation from taking the shared proxy down: bodies are
never read before the verdict, and each source address has its own limits.

mitmproxy 11 reads a request's whole body before it answers one its ``requestheaders`` hook
refused, buffers headers without a bound ("FIXME: protect against header size DoS"), keeps
reading while a hook waits (a held push's body piles up in memory for as long as the person
takes) and lets one address open as many connections as the kernel allows. So that one
container cannot exhaust what every conversation shares, this module, loaded by the addon,
changes four things in mitmproxy's HTTP layers (the image pins mitmproxy 11.0.2; ``patch``
refuses any other version, so an upgrade fails loudly in the proxy tests):

- ``refuse_before_body``: a refused request with a body gets its response and the connection
  is closed, its body never read (``HttpStream.check_killed`` sends the response a killed
  flow carries in ``flow.metadata``);
- ``BodyHead``: while a held request waits for a person, at most its first ``limit`` bytes
  are kept (for the card); past that, reading from the client stops until the decision
  (TCP back-pressure, ``resume_reading``);
- request heads are capped (``MAX_HEAD`` bytes, 431) and must arrive within
  ``HEAD_DEADLINE_S`` once begun (slow senders, 408); bytes sent ahead while a response is
  pending are capped too;
- ``SourceLimits``: connections open at once and opened per second, and requests per second,
  per source address (``client_connected`` / ``requestheaders`` in the addon).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Generator
from typing import Any

from mitmproxy import ctx, http, version  # type: ignore[import-not-found]
from mitmproxy.net.http import status_codes  # type: ignore[import-not-found]
from mitmproxy.proxy import commands  # type: ignore[import-not-found]
from mitmproxy.proxy.layers.http import (  # type: ignore[import-not-found]
    HttpStream,
    SendHttp,
)
from mitmproxy.proxy.layers.http._events import (  # type: ignore[import-not-found]
    RequestData,
    RequestEndOfMessage,
    RequestProtocolError,
    ResponseData,
    ResponseEndOfMessage,
    ResponseHeaders,
    ResponseProtocolError,
)
from mitmproxy.proxy.layers.http._http1 import (  # type: ignore[import-not-found]
    Http1Connection,
    Http1Server,
)

PINNED = "11.0.2"
MAX_HEAD = 64 * 1024
"""Request line and headers, at most (431 past it)."""
HEAD_DEADLINE_S = 10.0
"""From a request head's first byte to its end (408 past it): a slow sender is cut off."""
MAX_CONNECTIONS = 64
"""Connections one source address may hold open at once."""
CONNECTIONS_PER_S, CONNECTION_BURST = 200.0, 400.0
REQUESTS_PER_S, REQUEST_BURST = 200.0, 400.0
_REFUSAL = "gateway_bot_refusal"

log = logging.getLogger("gateway-bot-egress")
_streams: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
"""flow id -> its HttpStream (the layer whose queue holds the body while a hook runs)."""
_heads: dict[str, BodyHead] = {}
_slow_heads: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
"""HTTP/1 server layers reading a request head -> when its first byte came."""


def patch() -> None:
    if version.VERSION != PINNED:
        raise RuntimeError(f"egress_flow patches mitmproxy {PINNED}, not {version.VERSION}")
    if getattr(HttpStream, "_gateway_bot_patched", False):
        return
    original_event = HttpStream.handle_event
    original_killed = HttpStream.check_killed
    original_head = Http1Server.read_headers
    original_wait = Http1Connection.wait

    def handle_event(self: Any, event: Any) -> Generator[Any, Any, None]:
        yield from original_event(self, event)
        flow = getattr(self, "flow", None)
        if flow is not None:
            _streams[flow.id] = self
            head = _heads.get(flow.id)
            if head is not None:
                head.seen(event)

    def check_killed(self: Any, emit_error_hook: bool) -> Generator[Any, Any, bool]:
        response = self.flow.metadata.pop(_REFUSAL, None) if self.flow else None
        if response is not None and self.flow.error is not None:
            stream = self.stream_id
            yield SendHttp(ResponseHeaders(stream, response, False), self.context.client)
            yield SendHttp(ResponseData(stream, response.raw_content), self.context.client)
            yield SendHttp(ResponseEndOfMessage(stream), self.context.client)
            yield SendHttp(
                ResponseProtocolError(stream, "refused", status_codes.NO_RESPONSE),
                self.context.client,
            )
            self.flow.live = False
            self.client_state = self.server_state = self.state_errored
            return True
        return (yield from original_killed(self, emit_error_hook))

    def read_headers(self: Any, event: Any) -> Generator[Any, Any, None]:
        if len(self.buf) > MAX_HEAD and not _head_ends_within(self.buf, MAX_HEAD):
            yield from _end(self, 431, f"request headers longer than {MAX_HEAD} bytes")
            return
        yield from original_head(self, event)
        if self.state != self.read_headers or not self.buf:
            _slow_heads.pop(self, None)
            return
        _slow_heads.setdefault(self, time.monotonic())
        if len(self.buf) > MAX_HEAD:
            yield from _end(self, 431, f"request headers longer than {MAX_HEAD} bytes")

    def wait(self: Any, event: Any) -> Generator[Any, Any, None]:
        if isinstance(self, Http1Server) and len(self.buf) > MAX_HEAD:
            yield from _end(self, 400, "too much sent ahead of a pending response")
            return
        yield from original_wait(self, event)

    HttpStream.handle_event = handle_event
    HttpStream.check_killed = check_killed
    Http1Server.read_headers = read_headers
    Http1Connection.wait = wait
    HttpStream._gateway_bot_patched = True


def _head_ends_within(buffer: Any, limit: int) -> bool:
    start = bytes(buffer)[: limit + 4]
    return b"\r\n\r\n" in start or b"\n\n" in start


def _end(layer: Any, status: int, why: str) -> Generator[Any, Any, None]:
    _slow_heads.pop(layer, None)
    layer.buf = type(layer.buf)()
    yield commands.SendData(layer.conn, _error(status, why))
    yield commands.CloseConnection(layer.conn)
    layer.state = layer.done


def _error(status: int, why: str) -> bytes:
    body = f"Blocked by gateway-bot's egress proxy: {why}.\n".encode()
    reason = status_codes.RESPONSES.get(status, "Error")
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"X-Gateway-Bot-Blocked: {why}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


async def sweep_slow_heads() -> None:
    """Every second: close connections whose request head began more than
    ``HEAD_DEADLINE_S`` ago and has not ended (headers dribbled a byte at a time)."""
    while True:
        await asyncio.sleep(1)
        now = time.monotonic()
        for layer, began in list(_slow_heads.items()):
            if now - began > HEAD_DEADLINE_S:
                _slow_heads.pop(layer, None)
                why = f"request headers not sent within {HEAD_DEADLINE_S:g} s"
                _close(layer.conn, _error(408, why))


def refuse_before_body(flow: http.HTTPFlow, response: http.Response) -> None:
    """Answer ``response`` now and close the connection, reading no more of the request."""
    response.headers["Connection"] = "close"
    flow.metadata[_REFUSAL] = response
    flow.kill()


def has_body(request: http.Request) -> bool:
    """Might a body follow these headers? (HTTP/2 and 3 do not say in the headers.)"""
    if request.is_http2 or request.is_http3:
        return True
    if request.headers.get("transfer-encoding"):
        return True
    length = request.headers.get("content-length", "0").strip()
    return length != "0"


class BodyHead:
    """The first ``limit`` bytes of a held request's body, as they arrive; reading from the
    client stops once that much is in (``resume`` starts it again). ``ready`` is set when
    the body ended, failed or reached the limit."""

    def __init__(self, flow: http.HTTPFlow, limit: int) -> None:
        self.flow, self.limit = flow, limit
        self.data = bytearray()
        self.size = 0
        self.complete = False
        self.ready = asyncio.Event()
        self._paused = False
        _heads[flow.id] = self
        stream = _streams.get(flow.id)
        for event in list(getattr(stream, "_paused_event_queue", ())):
            self.seen(event)  # what came in before this was made

    def seen(self, event: Any) -> None:
        if isinstance(event, RequestData):
            self.size += len(event.data)
            room = self.limit - len(self.data)
            if room > 0:
                self.data += event.data[:room]
            if self.size >= self.limit:
                self._pause()
                self.ready.set()
        elif isinstance(event, (RequestEndOfMessage, RequestProtocolError)):
            self.complete = isinstance(event, RequestEndOfMessage)
            self.ready.set()

    async def wait(self, timeout_s: float) -> bytes:
        """The head once ready, or what came within ``timeout_s`` (a slow sender)."""
        try:
            await asyncio.wait_for(self.ready.wait(), timeout_s)
        except TimeoutError:
            self._pause()
        return bytes(self.data)

    def _pause(self) -> None:
        if not self._paused:
            self._paused = _transport(self.flow.client_conn, "pause_reading")

    def resume(self) -> None:
        _heads.pop(self.flow.id, None)
        if self._paused:
            _transport(self.flow.client_conn, "resume_reading")
            self._paused = False

    def forget(self) -> None:
        _heads.pop(self.flow.id, None)


def _handler(client: Any) -> Any:
    proxyserver = ctx.master.addons.get("proxyserver")
    return proxyserver.connections.get(client.id) if proxyserver else None


def _transport(client: Any, action: str) -> bool:
    handler = _handler(client)
    io = handler.transports.get(client) if handler else None
    transport = getattr(io.writer, "transport", None) if io else None
    if transport is None or transport.is_closing():
        return False
    getattr(transport, action)()
    return True


def _close(client: Any, farewell: bytes = b"") -> None:
    handler = _handler(client)
    io = handler.transports.get(client) if handler else None
    if io is None or io.handler is None:
        return
    if farewell and io.writer is not None and not io.writer.is_closing():
        io.writer.write(farewell)
    io.handler.cancel("gateway-bot egress limit")


class TokenBucket:
    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.stamp = burst, time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class SourceLimits:
    """Per source address (one conversation): connections open and opened, requests made."""

    def __init__(self) -> None:
        self.open: dict[str, int] = {}
        self._connections: dict[str, TokenBucket] = {}
        self._requests: dict[str, TokenBucket] = {}

    def connect(self, source: str) -> str | None:
        """None, or why this new connection is refused."""
        bucket = self._connections.setdefault(
            source, TokenBucket(CONNECTIONS_PER_S, CONNECTION_BURST)
        )
        if self.open.get(source, 0) >= MAX_CONNECTIONS:
            return f"more than {MAX_CONNECTIONS} connections open from one conversation"
        if not bucket.take():
            return f"more than {CONNECTIONS_PER_S:g} new connections a second"
        self.open[source] = self.open.get(source, 0) + 1
        return None

    def disconnect(self, source: str) -> None:
        left = self.open.get(source, 0) - 1
        if left > 0:
            self.open[source] = left
        else:
            self.open.pop(source, None)

    def request(self, source: str) -> bool:
        bucket = self._requests.setdefault(source, TokenBucket(REQUESTS_PER_S, REQUEST_BURST))
        return bucket.take()
