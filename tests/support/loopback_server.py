"""An aiohttp server on 127.0.0.1 in its own thread, for the fake model APIs.

Sync and async tests share one fake per session: its loop must be neither blocked by the
test nor owned by it. ``tests/support/fake_anthropic.py`` has its own copy of this; the fakes of the
Gemini API and the OpenAI Responses API build on this one.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Self

from aiohttp import web


class LoopbackServer:
    """``start()``/``stop()`` it; subclasses add their routes in ``routes``."""

    name = "fake-api"

    def __init__(self) -> None:
        self._port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        started = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(self._serve(sock))
            except BaseException as exc:  # surfaced to start()'s caller below
                errors.append(exc)
                self._loop.close()
                started.set()
                return
            started.set()
            self._loop.run_forever()
            self._loop.close()

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        if not started.wait(10) or errors:
            self._loop = self._thread = None
            raise errors[0] if errors else TimeoutError(f"{self.name} did not start")

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop = self._thread = self._runner = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _serve(self, sock: socket.socket) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        self.routes(app)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()
