"""A git smart-HTTP server for tests: ``git http-backend`` (git's own CGI program) behind a tiny
aiohttp wrapper, serving the bare repositories under one directory, pushes included (the CGI
sees an authenticated REMOTE_USER, which is what enables receive-pack).

It listens on 127.0.0.1; a sandboxed client reaches it through the egress proxy and a relay
on the egress network's gateway (``tests/sandbox_fixtures.Relay``), as it would a real forge.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

from aiohttp import web


class GitHttpServer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = 0
        self.requests: list[tuple[str, str]] = []
        """(method, path) of every request the server got, in order."""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        assert server.sockets
        self.port = server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def bare_repo(self, name: str) -> Path:
        path = self.root / name
        subprocess.run(
            ["git", "init", "-q", "--bare", "--initial-branch=main", str(path)], check=True
        )
        return path

    @staticmethod
    def ref(repo: Path, ref: str) -> str | None:
        found = subprocess.run(
            ["git", "--git-dir", str(repo), "rev-parse", "--verify", "-q", ref],
            capture_output=True,
            text=True,
        )
        return found.stdout.strip() if found.returncode == 0 else None

    @staticmethod
    def subject(repo: Path, ref: str) -> str:
        return subprocess.run(
            ["git", "--git-dir", str(repo), "log", "-1", "--format=%s", ref],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path))
        body = await request.read()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": "tester",
            "REMOTE_ADDR": "127.0.0.1",
            "REQUEST_METHOD": request.method,
            "PATH_INFO": request.path,
            "QUERY_STRING": request.query_string,
            "CONTENT_TYPE": request.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
        }
        if encoding := request.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = encoding
        if protocol := request.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = protocol
        process = await asyncio.create_subprocess_exec(
            "git",
            "http-backend",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=env,
        )
        out, _ = await process.communicate(body)
        head, _, payload = out.partition(b"\r\n\r\n")
        status, headers = 200, {}
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers[name.strip()] = value.strip()
        return web.Response(status=status, body=payload, headers=headers)
