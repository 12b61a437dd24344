"""A real SMTP server (aiosmtpd) on 127.0.0.1 that catches what the bot sends: every
accepted message kept, a message withheld its 250 on demand (``hold_after_accept``), and
XOAUTH2 logins checked against a token service (``check_token``)."""

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
from aiosmtpd.smtp import AuthResult


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
            controller = Controller(
                _Catch(self),
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
