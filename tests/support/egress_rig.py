"""The real egress proxy with real servers behind it, for attacks on how it reads requests.

One ``ProxyRig`` per test module: the sandbox's own ``EgressProxy`` (the proxy image, its
addon, the command line the daemon starts it with) on two test networks standing for two
conversations, ``a`` and ``b``. The test is the conversation: it connects from the host's
side of network ``a`` (or ``b``), so the proxy sees that network's gateway as the source
address, which ``route`` maps to rules as the daemon maps an agent's address. Behind the
proxy, on the egress network's gateway, listen an aiohttp app (``Upstreams.app``: every
request answers with the route aiohttp matched and the path it read) and git's own
``git http-backend`` behind Debian's lighttpd (``/git/repo.git``). A held request is asked on
the real ask socket (``EgressAskListener``); ``answer`` says what the person answers.

Requests are written byte for byte (``send``): no client library normalises them first.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import select
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from gateway_bot.config.sandbox import SandboxSettings
from gateway_bot.sandbox.egress.held import HeldRequest
from gateway_bot.sandbox.egress.rules import EgressRule
from gateway_bot.sandbox.podman.egress_asks import EgressAskListener
from gateway_bot.sandbox.podman.sandbox import PodmanSandbox
from tests.conftest import GIT_IDENTITY
from tests.support.sandbox_fixtures import IP_FREEBIND, SESSION_PODMAN, EgressNetwork, podman

T = TypeVar("T")
PROXY_PORT = 8080
MESSAGE_TIMEOUT_S = 20
"""A guard so a request the proxy never answers fails the test, not a speed check."""


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    closed_early: bool = False
    """The connection ended before the whole request was sent (a refusal before the body)."""

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Conversation:
    network: str
    source: str
    """The host's address on the network: what the proxy sees as the source."""
    proxy: str
    context: str


@dataclass
class Upstreams:
    host: str
    app_port: int = 0
    git_port: int = 0
    seen: list[dict[str, str]] = field(default_factory=list)
    """Every request the aiohttp app served: route, method, path, raw_path."""


class ProxyRig:
    def __init__(self, root: Path, egress: EgressNetwork, podman_socket: Path) -> None:
        self.root = root
        self.egress = egress
        self.deployment = f"test-{secrets.token_hex(4)}"
        SESSION_PODMAN.deployments.add(self.deployment)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        settings = SandboxSettings.model_validate(
            {
                "kind": "podman",
                "deployment": self.deployment,
                "egress_network": egress.name,
                "podman": {"socket": str(podman_socket)},
            }
        )
        self.sandbox = PodmanSandbox(settings, root / "state", {})
        self.proxy = self.sandbox.proxy
        self.asks = EgressAskListener(self.proxy.directory, lambda _: True, 5)
        self.asks.ask = self._ask
        self.asked: list[HeldRequest] = []
        self.answer = "deny"
        self.conversations: dict[str, Conversation] = {}
        self.upstreams = Upstreams(egress.gateway)
        self._runner: web.AppRunner | None = None
        self._lighttpd: subprocess.Popen[bytes] | None = None
        self.bare = root / "repos" / "repo.git"

    # -- set-up ---------------------------------------------------------------------------

    def start(self) -> None:
        for name in ("a", "b"):
            network = f"gwb-test-egr-{self.deployment}-{name}"
            podman(
                "network", "create", "--disable-dns",
                "--label", f"gateway-bot.deployment={self.deployment}", network,
            )  # fmt: skip
            subnet = json.loads(podman("network", "inspect", network).stdout)[0]["subnets"][0]
            gateway = subnet["gateway"]
            proxy = gateway.rsplit(".", 1)[0] + ".2"
            self.conversations[name] = Conversation(network, gateway, proxy, f"conv-{name}")
        networks = [(c.network, c.proxy) for c in self.conversations.values()]
        self.run(self.proxy.ensure(networks))
        self.run(self.asks.start())
        self.run(self._start_app())
        self._start_git()

    def close(self) -> None:
        if self._lighttpd is not None:
            self._lighttpd.terminate()
            self._lighttpd.wait(10)
        if self._runner is not None:
            self.run(self._runner.cleanup())
        self.run(self.asks.close())
        self.run(self.sandbox.close())
        for kind in ("proxy",):
            listed = podman(
                "ps", "-aq", "--filter", f"label=gateway-bot.deployment={self.deployment}",
                "--filter", f"label=gateway-bot.role={kind}",
            ).stdout.split()  # fmt: skip
            if listed:
                podman("rm", "-f", "-t", "0", *listed, check=False)
        for conversation in self.conversations.values():
            podman("network", "rm", "-f", conversation.network, check=False)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(300)

    def route(self, rules: Sequence[EgressRule], conversation: str = "a") -> None:
        """The conversation's rules (the server's git push ask rule is the caller's to add)."""
        chosen = self.conversations[conversation]
        self.run(
            self.proxy.set_route(chosen.source, chosen.context, rules, (), 5, listen=chosen.proxy)
        )

    async def _ask(self, held: HeldRequest) -> tuple[bool, str]:
        self.asked.append(held)
        return (self.answer == "allow"), f"the test said {self.answer}"

    async def _start_app(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        for name, pattern in (
            ("pub", "/pub/{tail:.*}"),
            ("admin", "/admin/{tail:.*}"),
            ("push", "/repo.git/git-receive-pack"),
            ("fetch", "/repo.git/git-upload-pack"),
            ("refs", "/repo.git/info/refs"),
            ("ws", "/ws"),
            ("other", "/{tail:.*}"),
        ):
            app.router.add_route("*", pattern, self._served(name), name=name)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        listener = _freebind_socket(self.upstreams.host)
        site = web.SockSite(self._runner, listener)
        await site.start()
        self.upstreams.app_port = listener.getsockname()[1]

    def _served(self, name: str) -> Callable[[web.Request], Coroutine[Any, Any, Any]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            if name == "ws":
                socket_response = web.WebSocketResponse()
                await socket_response.prepare(request)
                async for message in socket_response:
                    await socket_response.send_str(f"echo {message.data}")
                return socket_response
            size = 0
            async for chunk in request.content.iter_any():
                size += len(chunk)
            seen = {
                "route": name,
                "method": request.method,
                "path": request.path,
                "raw_path": request.raw_path,
                "host": request.host,
                "size": str(size),
            }
            self.upstreams.seen.append(seen)
            return web.json_response(seen)

        return handle

    def _start_git(self) -> None:
        repos = self.bare.parent
        repos.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(self.bare)], check=True)
        subprocess.run(
            ["git", "--git-dir", str(self.bare), "config", "http.receivepack", "true"], check=True
        )
        probe = _freebind_socket(self.upstreams.host)
        port = probe.getsockname()[1]
        probe.close()
        config = self.root / "lighttpd.conf"
        config.write_text(
            f'server.document-root = "{repos}"\n'
            f'server.bind = "{self.upstreams.host}"\n'
            f"server.port = {port}\n"
            'server.modules = ("mod_alias", "mod_cgi", "mod_setenv")\n'
            f'server.errorlog = "{self.root / "lighttpd-error.log"}"\n'
            'alias.url = ("/git" => "/usr/lib/git-core/git-http-backend")\n'
            '$HTTP["url"] =~ "^/git" {\n'
            '  cgi.assign = ("" => "")\n'
            f'  setenv.add-environment = ("GIT_PROJECT_ROOT" => "{repos}", '
            '"GIT_HTTP_EXPORT_ALL" => "1")\n'
            "}\n"
        )
        self._lighttpd = subprocess.Popen(
            ["lighttpd", "-D", "-f", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.upstreams.git_port = port
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection((self.upstreams.host, port), 1).close()
                return
            except OSError:
                if self._lighttpd.poll() is not None or time.monotonic() > deadline:
                    error = self._lighttpd.stderr.read() if self._lighttpd.stderr else b""
                    raise AssertionError(f"lighttpd did not start: {error!r}") from None
                time.sleep(0.05)

    # -- what a test does -----------------------------------------------------------------

    def send(
        self,
        head: bytes,
        body: bytes = b"",
        conversation: str = "a",
        *,
        body_chunks: int = 0,
    ) -> Reply:
        """Write ``head`` (request line and headers, ``\\r\\n\\r\\n`` included), then ``body``
        (or ``body_chunks`` MB of zeros, stopping as soon as an answer comes), then read
        the answer. The body is left unsent when the proxy answers first."""
        chosen = self.conversations[conversation]
        return send_raw(chosen.proxy, PROXY_PORT, head, body, body_chunks=body_chunks)

    def proxy_state(self) -> tuple[str, int]:
        """(start time, restart count) of the proxy container: a crash shows in either."""
        info = json.loads(podman("inspect", self.proxy.name).stdout)[0]
        return info["State"]["StartedAt"], int(info.get("RestartCount", 0))

    def network_log(self, conversation: str = "a") -> list[dict[str, Any]]:
        path = self.proxy.log_path(self.conversations[conversation].context)
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line]

    def push_body(self, subject: str) -> tuple[bytes, str]:
        """A receive-pack request body creating refs/heads/main at a new commit."""
        work = self.root / f"work-{secrets.token_hex(3)}"
        subprocess.run(["git", "init", "-q", str(work)], check=True)
        git = ["git", "-C", str(work), *GIT_IDENTITY]
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", subject], check=True)
        head = subprocess.run(
            [*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        pack = subprocess.run(
            [*git, "pack-objects", "--stdout", "--revs", "-q"],
            input=b"HEAD\n",
            capture_output=True,
            check=True,
        ).stdout
        command = f"{'0' * 40} {head} refs/heads/main\0report-status\n".encode()
        return b"%04x" % (len(command) + 4) + command + b"0000" + pack, head

    def branch(self) -> str | None:
        found = subprocess.run(
            ["git", "--git-dir", str(self.bare), "rev-parse", "--verify", "-q", "refs/heads/main"],
            capture_output=True,
            text=True,
        )
        return found.stdout.strip() or None


def send_raw(
    host: str, port: int, head: bytes, body: bytes = b"", *, body_chunks: int = 0
) -> Reply:
    """One request on a new connection to ``host:port`` (``ProxyRig.send``)."""
    with socket.create_connection((host, port), MESSAGE_TIMEOUT_S) as client:
        closed_early = False
        try:
            client.sendall(head)
            if body:
                client.sendall(body)
            zeros = bytes(1024 * 1024)
            for _ in range(body_chunks):
                readable, _, _ = select.select([client], [], [], 0)
                if readable:
                    closed_early = True
                    break
                client.sendall(zeros)
        except OSError:
            closed_early = True
        return read_reply(client, closed_early)


def _freebind_socket(host: str) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
    listener.bind((host, 0))
    listener.listen(256)
    return listener


def read_reply(client: socket.socket, closed_early: bool) -> Reply:
    data = b""
    client.settimeout(MESSAGE_TIMEOUT_S)
    try:
        while b"\r\n\r\n" not in data:
            chunk = client.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if not lines or not lines[0].startswith("HTTP/"):
        return Reply(0, {}, data, closed_early)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    status = int(lines[0].split()[1])
    if status == 101:  # switched protocols: what follows is the new protocol's
        return Reply(status, headers, rest, closed_early)
    length = int(headers.get("content-length", "-1"))
    try:
        while length < 0 or len(rest) < length:
            chunk = client.recv(65536)
            if not chunk:
                break
            rest += chunk
    except OSError:
        pass
    return Reply(status, headers, rest, closed_early)
