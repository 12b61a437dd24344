"""A real SMTP server (aiosmtpd) on 127.0.0.1 that catches what the bot sends: every
accepted message kept, a message withheld its 250 on demand (``hold_after_accept``), a
DATA command withheld its 354 on demand (``hold_data``), the data of every transaction cut
off before its end kept apart (``cut_off``), and XOAUTH2 logins checked against a token
service (``check_token``)."""

from __future__ import annotations

import asyncio
import base64
import email
import email.policy
import socket
import threading
import time
from collections.abc import Callable
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Catch:
    def __init__(self, sink: SmtpCatcher) -> None:
        self._sink = sink

    async def auth_XOAUTH2(self, server: Any, args: list[str]) -> AuthResult:
        """RFC-less but universal: base64 of ``user=U^Aauth=Bearer T^A^A``."""
        check = self._sink.check_token
        try:
            fields = dict(
                item.split("=", 1)
                for item in base64.b64decode(args[1]).decode().split("\x01")
                if "=" in item
            )
        except (IndexError, ValueError):
            return AuthResult(success=False)
        user, token = fields.get("user", ""), fields.get("auth", "").removeprefix("Bearer ")
        ok = check is not None and check(token) == user
        self._sink.logins.append((user, token, ok))
        return AuthResult(success=ok, auth_data=user)

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: list[str]
    ) -> str:
        if self._sink.refusing:
            return "451 4.3.2 System not accepting messages now"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        self._sink.add(list(envelope.rcpt_tos), message)
        hold = self._sink.hold_after_accept
        if hold and hold in envelope.content.decode(errors="replace"):
            self._sink.holding.set()
            # the sender never hears the 250 until the test releases it
            await asyncio.to_thread(self._sink.released.wait)
        return "250 OK"


class _Server(SMTP):
    """aiosmtpd's server, plus what a handler cannot see: the DATA command itself (held on
    demand) and a connection's raw bytes (the data of a transaction cut off mid-way)."""

    def __init__(self, handler: _Catch, sink: SmtpCatcher, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._sink = sink
        self._heard = bytearray()

    def data_received(self, data: bytes) -> None:
        self._heard += data
        super().data_received(data)

    def connection_lost(self, error: Exception | None) -> None:
        if (unfinished := _unfinished_data(bytes(self._heard))) is not None:
            self._sink.cut_off.append(unfinished)
        super().connection_lost(error)

    async def smtp_DATA(self, arg: str) -> None:
        if self._sink.hold_data:
            self._sink.hold_data = False  # once: the next DATA goes through
            self._sink.holding_data.set()
            await asyncio.to_thread(self._sink.released.wait)
        await super().smtp_DATA(arg)


def _unfinished_data(heard: bytes) -> bytes | None:
    """The data (dot-stuffing undone) of a transaction whose DATA never ended, if the
    connection's last one did not: what a client killed mid-transaction handed over."""
    data: list[bytes] | None = None
    for line in heard.split(b"\r\n"):
        if data is None:
            if line.upper() == b"DATA":
                data = []
        elif line == b".":
            data = None
        else:
            data.append(line[1:] if line.startswith(b".") else line)
    return None if data is None else b"\r\n".join(data)


class _Controller(Controller):
    def __init__(self, sink: SmtpCatcher, **kwargs: Any) -> None:
        super().__init__(_Catch(sink), **kwargs)
        self._sink = sink

    def factory(self) -> SMTP:
        return _Server(self.handler, self._sink, **self.SMTP_kwargs)


class SmtpCatcher:
    """A real SMTP server (aiosmtpd) on 127.0.0.1 that keeps every message it accepts."""

    def __init__(self) -> None:
        self.messages: list[tuple[list[str], EmailMessage]] = []
        self._changed = threading.Condition()
        self.check_token: Callable[[str], str | None] | None = None
        """When set, sending needs AUTH XOAUTH2 with a token it maps to the login user."""
        self.logins: list[tuple[str, str, bool]] = []
        self.hold_after_accept = ""
        """A message containing this is kept, but its 250 waits for ``released``."""
        self.holding = threading.Event()
        self.released = threading.Event()
        self.controller: Controller | None = None
        self.port = 0
        self.refusing = False
        """While True every recipient gets a 451 (a server that refuses mail for now)."""
        self.hold_data = False
        """When set, the next DATA command waits for ``released`` before its 354 (the client
        has said DATA and handed over nothing yet); ``holding_data`` says it arrived."""
        self.holding_data = threading.Event()
        self.cut_off: list[bytes] = []
        """The data each transaction cut off before its end had carried (a client that died
        mid-DATA): the server delivered none of them."""

    def add(self, recipients: list[str], message: EmailMessage) -> None:
        with self._changed:
            self.messages.append((recipients, message))
            self._changed.notify_all()

    def start(self) -> None:
        self._start_on(None)

    def start_on(self, port: int) -> None:
        """Start again on the port a daemon's config names (after ``stop``)."""
        self._start_on(port)

    def _start_on(self, port: int | None) -> None:
        self.released.clear()
        for _ in range(50):
            self.port = port or free_port()
            controller = _Controller(
                self,
                hostname="127.0.0.1",
                port=self.port,
                auth_required=self.check_token is not None,
                auth_require_tls=False,
            )
            try:
                controller.start()
            except Exception:  # the port was taken between the probe and the bind
                time.sleep(0.1)
                continue
            self.controller = controller
            return
        raise RuntimeError("no free port for the SMTP catcher")

    def stop(self) -> None:
        self.released.set()
        if self.controller is not None:
            self.controller.stop()
            self.controller = None

    def to(self, recipient: str) -> list[EmailMessage]:
        with self._changed:
            return [m for rcpts, m in self.messages if recipient in rcpts]

    def wait_for(
        self,
        recipient: str,
        count: int = 1,
        timeout: float = 90,
        where: Callable[[EmailMessage], bool] = lambda m: True,
    ) -> list[EmailMessage]:
        """Wait until ``recipient`` got ``count`` messages matching ``where``."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = [m for rcpts, m in self.messages if recipient in rcpts and where(m)]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"{recipient} got {len(found)} of {count} messages: "
                        f"{[m['Subject'] for _, m in self.messages]}"
                    )
                self._changed.wait(left)
