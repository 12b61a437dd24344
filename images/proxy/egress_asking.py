"""Asking the daemon about a held request: one connection to ``/egress/asks.sock`` per request,
one JSON line each way (``sandbox/podman/egress_asks.py`` is the other end)."""

from __future__ import annotations

import asyncio
import base64
import json
import zlib

from egress_routes import ASKS, Route, write_log  # type: ignore[import-not-found]
from gwb_egress.rules import EgressRule  # type: ignore[import-not-found]
from gwb_egress.target import RequestTarget  # type: ignore[import-not-found]
from mitmproxy import http  # type: ignore[import-not-found]

MAX_ASK_BODY = 1024 * 1024
"""The daemon sees at most this much of a held body (a push's refs come first)."""
ANSWER_GRACE_S = 30
"""How much longer than the daemon's own timeout a held request waits for an answer."""


async def ask_daemon(
    flow: http.HTTPFlow,
    route: Route,
    rule: EgressRule | None,
    target: RequestTarget,
    body: bytes,
    size: int,
) -> tuple[bool, str]:
    """Ask the daemon; (allowed, why). Every failure is a refusal that says what happened."""
    described = rule.describe() if rule is not None else "ask"
    write_log(
        route.context,
        {"method": target.method, "url": target.url, "allowed": False, "held": True,
         "reason": f"held for approval ({described})"},
    )  # fmt: skip
    ask = {
        "context": route.context,
        "method": target.method,
        "scheme": target.scheme,
        "host": target.host,
        "port": target.port,
        "path": target.origin_form,
        "rule": described,
        "body": base64.b64encode(inflated(flow.request, body)).decode("ascii"),
        "body_size": size,
    }
    try:
        reader, writer = await asyncio.open_unix_connection(str(ASKS))
    except OSError:
        return False, "the gateway-bot daemon is not there to approve it"
    try:
        writer.write(json.dumps(ask).encode() + b"\n")
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), route.ask_timeout_s + ANSWER_GRACE_S)
    except (TimeoutError, OSError, ValueError):
        return False, "no answer from the gateway-bot daemon"
    finally:
        writer.close()
    if not line:
        return False, "the gateway-bot daemon stopped while the request waited for approval"
    try:
        answer = json.loads(line)
        allowed, why = answer["allow"], answer["reason"]
    except (ValueError, KeyError, TypeError):
        return False, "the gateway-bot daemon's answer was unreadable"
    if allowed is not True:
        return False, str(why)[:300] or "denied"
    return True, str(why)[:300] or "approved"


def inflated(request: http.Request, raw: bytes) -> bytes:
    """The first ``MAX_ASK_BODY`` bytes of the body, decoded when it is compressed (inflated
    only that far: a small gzip bomb costs nothing)."""
    encoding = request.headers.get("content-encoding", "").strip().lower()
    if encoding in ("gzip", "x-gzip", "deflate"):
        try:
            return zlib.decompressobj(47).decompress(raw, MAX_ASK_BODY)  # gzip or zlib
        except zlib.error:
            return raw[:MAX_ASK_BODY]
    return raw[:MAX_ASK_BODY]
