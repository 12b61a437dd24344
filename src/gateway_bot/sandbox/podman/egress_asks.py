"""The daemon's side of a held egress request: a unix socket the proxy asks on.

The proxy container sees the egress directory read-only, this socket included (connecting to
a socket needs no write access to its filesystem). A request matching an ask rule is held by
the addon, which connects here, writes one JSON line describing it, and waits for one JSON
line back: ``{"id", "allow", "reason"}``. One connection is one request, so a decision can
only ever reach the request it was made for, and whichever side goes away ends it: the proxy
restarting cancels the pending ask here; the daemon stopping (kill -9 included) closes the
connection, and the addon refuses the request with a reason the client sees. Nothing is left
behind to apply later. (Chosen over held-request files the daemon polls: no stale records to
sweep after a crash, no files in a directory the proxy writes, no polling.)

The proxy is less trusted than the daemon: a line is at most ``MAX_LINE`` bytes, parsed as
strict JSON (no NaN, no duplicate keys, exact types, bounded strings), for a context this
sandbox routes; anything else is refused. The socket is bound through ``/proc/self/fd`` of
the directory opened no-follow, so its path can be long and never follows a link.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import os
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gateway_bot.sandbox.egress.git_push import parse_push
from gateway_bot.sandbox.egress.held import EgressAsk, HeldRequest
from gateway_bot.sandbox.egress.target import AmbiguousTarget, read_origin_form

log = logging.getLogger(__name__)

SOCKET_NAME = "asks.sock"
MAX_BODY = 1024 * 1024
"""The proxy sends at most this much of a held request's body (where a push's refs are)."""
MAX_LINE = 2 * MAX_BODY
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CONTEXT_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_METHOD = re.compile(r"^[A-Za-z]{1,20}$")
_HOST = re.compile(r"^[A-Za-z0-9.\-:\[\]_]{1,255}$")
_FIELDS: dict[str, type] = {
    "context": str,
    "method": str,
    "scheme": str,
    "host": str,
    "port": int,
    "path": str,
    "rule": str,
    "body": str,
    "body_size": int,
}


class RefusedAsk(ValueError):
    """A line from the proxy that is not a well-formed ask."""


@dataclass(frozen=True)
class Answer:
    id: str
    allow: bool
    reason: str

    def line(self) -> bytes:
        return json.dumps({"id": self.id, "allow": self.allow, "reason": self.reason}).encode()


class EgressAskListener:
    """Serves the proxy's asks for one deployment while the daemon runs."""

    def __init__(
        self, directory: Path, knows_context: Callable[[str], bool], timeout_s: float
    ) -> None:
        self.directory = directory
        self._knows_context = knows_context
        self.timeout_s = timeout_s
        self.ask: EgressAsk | None = None
        self._server: asyncio.Server | None = None
        self._directory_fd: int | None = None
        self._serving: set[asyncio.Task[Any]] = set()

    @property
    def path(self) -> Path:
        return self.directory / SOCKET_NAME

    async def start(self) -> None:
        """Bind afresh (a socket a killed daemon left is replaced). Idempotent."""
        if self._server is not None:
            return
        await asyncio.to_thread(self.directory.mkdir, parents=True, exist_ok=True)
        descriptor = os.open(self.directory, _DIR_FLAGS)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(SOCKET_NAME, dir_fd=descriptor)
            self._server = await asyncio.start_unix_server(
                self._serve, path=f"/proc/self/fd/{descriptor}/{SOCKET_NAME}", limit=MAX_LINE
            )
            os.chmod(SOCKET_NAME, 0o600, dir_fd=descriptor)  # the proxy runs as root
        except BaseException:
            os.close(descriptor)
            raise
        self._directory_fd = descriptor

    async def close(self) -> None:
        """Stop listening; asks in flight are cancelled and their requests refused."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for task in list(self._serving):  # Python 3.11's Server.close leaves them running
            task.cancel()
        await asyncio.gather(*self._serving, return_exceptions=True)
        if self._directory_fd is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(SOCKET_NAME, dir_fd=self._directory_fd)
            os.close(self._directory_fd)
            self._directory_fd = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._serving.add(task)
        try:
            answer = await self._answer(reader)
            if answer is not None:
                writer.write(answer.line() + b"\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._serving.discard(task)
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader) -> Answer | None:
        request_id = secrets.token_urlsafe(16)
        try:
            line = await reader.readuntil(b"\n")
            held = parse_ask(line, request_id, self._knows_context)
        except (asyncio.LimitOverrunError, ValueError) as exc:
            log.warning("egress ask refused: the proxy sent a malformed ask (%s)", exc)
            return Answer(request_id, False, "malformed approval request")
        log.info("egress: %s holds %s", held.context_id, held.describe().replace("\n", "; "))
        ask = self.ask
        if ask is None:
            log.warning("egress ask %s refused: nothing in this daemon decides them", held.id)
            return Answer(held.id, False, "no approval service is set up for network writes")
        decision = asyncio.ensure_future(ask(held))
        gone = asyncio.ensure_future(reader.read(1))  # the proxy sends nothing more: EOF = gone
        try:
            done, _ = await asyncio.wait(
                {decision, gone}, timeout=self.timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for job in (decision, gone):
                if not job.done():
                    job.cancel()
            await asyncio.gather(decision, gone, return_exceptions=True)
        if decision in done and not decision.cancelled() and decision.exception() is None:
            allow, reason = _decision(decision.result())
            log.info("egress ask %s %s: %s", held.id, "allowed" if allow else "refused", reason)
            return Answer(held.id, allow, reason)
        if decision in done:
            log.warning("egress ask %s refused: deciding failed: %r", held.id, decision.exception())
            return Answer(held.id, False, "the approval could not be asked")
        if gone in done:
            log.info("egress ask %s dropped: the proxy let go of the request", held.id)
            return None
        log.info("egress ask %s refused: no decision within %g s", held.id, self.timeout_s)
        return Answer(held.id, False, f"no decision within {self.timeout_s:g} s")


def _decision(result: Any) -> tuple[bool, str]:
    if isinstance(result, tuple):
        allow, reason = result
        return bool(allow), str(reason)
    return bool(result), "approved" if result else "denied"


def parse_ask(line: bytes, request_id: str, knows_context: Callable[[str], bool]) -> HeldRequest:
    """A ``HeldRequest`` from the proxy's line. Raises ValueError (RefusedAsk) naming what is
    wrong with it; nothing in it is trusted beyond its checked shape."""
    try:
        data = json.loads(
            line.decode("utf-8"), parse_constant=_no_constant, object_pairs_hook=_unique_keys
        )
    except UnicodeDecodeError as exc:
        raise RefusedAsk("not UTF-8") from exc
    if not isinstance(data, dict) or set(data) != set(_FIELDS):
        raise RefusedAsk("not an object with exactly the expected fields")
    for name, kind in _FIELDS.items():
        if type(data[name]) is not kind:
            raise RefusedAsk(f"{name} is not a {kind.__name__}")
    context = data["context"]
    if not _CONTEXT_ID.match(context) or not knows_context(context):
        raise RefusedAsk(f"unknown context {context[:80]!r}")
    if not _METHOD.match(data["method"]) or data["scheme"] not in ("http", "https"):
        raise RefusedAsk("bad method or scheme")
    if not _HOST.match(data["host"]) or not 0 < data["port"] < 65536:
        raise RefusedAsk("bad host or port")
    path, rule = data["path"], data["rule"]
    if not path or len(path) > 8192 or len(rule) > 1000 or not path.isprintable():
        raise RefusedAsk("bad path or rule")
    try:
        normal, query = read_origin_form(path)
    except AmbiguousTarget as exc:
        raise RefusedAsk(f"path not readable one way only: {exc}") from exc
    if path != (f"{normal}?{query}" if query else normal):
        raise RefusedAsk("path not in its normal form (the proxy sends only that)")
    if not 0 <= data["body_size"] < 2**53:
        raise RefusedAsk("bad body size")
    try:
        body = base64.b64decode(data["body"], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise RefusedAsk("body is not base64") from exc
    if len(body) > MAX_BODY:
        raise RefusedAsk("body too long")
    held = HeldRequest(
        id=request_id,
        context_id=context,
        method=data["method"].upper(),
        scheme=data["scheme"],
        host=data["host"],
        port=data["port"],
        path=path,
        rule=rule,
        body_size=data["body_size"],
    )
    if not held.is_git_push:
        return held
    push = parse_push(body)
    return replace(
        held,
        refs=push.refs,
        commit_subjects=push.commit_subjects,
        commits_complete=push.commits_complete,
        refs_complete=push.refs_complete,
    )


def _no_constant(name: str) -> Any:
    raise RefusedAsk(f"{name} is not JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(keys) != len(set(keys)):
        raise RefusedAsk("a duplicate key")
    return dict(pairs)
