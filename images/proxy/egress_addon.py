"""mitmproxy addon: gateway-bot's egress allowlist, one shared proxy for every conversation.

Runs inside the proxy container (``/egress`` is a directory the daemon shares with it,
read-only but for ``/egress/logs``). Each conversation's container sits alone on its own
internal network with a fixed address; the daemon writes ``/egress/routes.json`` mapping that
source address to the conversation's execution context, allowlist and injected credentials.
So the source address of a connection says whose request it is, which rules apply, which
log gets the line (``/egress/logs/<context>.log``, linked as ``network.log`` beside the
conversation's ``events.jsonl``) and which credential header its requests to the model API
get (the agent only holds a placeholder; no other host ever sees the real value).

Blocked requests get 403 with the reason, before any connection to the target is made.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import socket
from pathlib import Path
from typing import Any

from egress_rules import (  # type: ignore[import-not-found]  # copied beside this file
    EgressRule,
    HeaderInjection,
    Verdict,
    decide,
    decide_address,
    decide_connect,
    decide_raw_stream,
    rules_from_json,
)
from mitmproxy import http, tcp  # type: ignore[import-not-found]

EGRESS_DIR = Path(os.environ.get("GATEWAY_BOT_EGRESS_DIR", "/egress"))
ROUTES = EGRESS_DIR / "routes.json"
LOGS = EGRESS_DIR / "logs"
READY = LOGS / "ready"

log = logging.getLogger("gateway-bot-egress")


class Route:
    """What the proxy knows of one source address."""

    def __init__(
        self, context: str, rules: tuple[EgressRule, ...], inject: tuple[HeaderInjection, ...]
    ) -> None:
        self.context = context
        self.rules = rules
        self.inject = inject

    @classmethod
    def from_json(cls, entry: dict[str, Any]) -> Route:
        return cls(
            str(entry["context"]),
            rules_from_json(entry.get("rules", [])),
            tuple(HeaderInjection.from_json(item) for item in entry.get("inject", [])),
        )


class Routes:
    """routes.json, re-read whenever the daemon replaces it (atomic rename: a new inode)."""

    def __init__(self) -> None:
        self._stamp: tuple[int, int, int] | None = None
        self._sources: dict[str, Route] = {}

    def lookup(self, address: str) -> Route | None:
        self._reload()
        if address.startswith("::ffff:"):
            address = address[len("::ffff:") :]
        return self._sources.get(address)

    def _reload(self) -> None:
        try:
            stat = ROUTES.stat()
        except FileNotFoundError:
            self._sources, self._stamp = {}, None
            return
        stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if stamp == self._stamp:
            return
        try:
            data = json.loads(ROUTES.read_text())
        except (OSError, ValueError) as exc:
            log.warning("routes.json unreadable, keeping the previous routes: %s", exc)
            return
        try:
            sources = {source: Route.from_json(entry) for source, entry in data["sources"].items()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            log.warning("routes.json malformed, keeping the previous routes: %s", exc)
            return
        self._sources, self._stamp = sources, stamp


class EgressAllowlist:
    def __init__(self) -> None:
        self.routes = Routes()

    def running(self) -> None:
        LOGS.mkdir(parents=True, exist_ok=True)
        READY.write_text(f"{os.getpid()}\n")

    def http_connect(self, flow: http.HTTPFlow) -> None:
        route = self._route(flow.client_conn.peername[0])
        host, port = flow.request.host, flow.request.port
        if route is None:
            self._block(flow, None, f"{host}:{port}", Verdict(False, "unknown source address"))
            return
        verdict = decide_connect(route.rules, host, port)
        if not verdict.allowed:
            self._block(flow, route.context, f"{host}:{port}", verdict)

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None:
            return
        route = self._route(flow.client_conn.peername[0])
        url = flow.request.pretty_url
        if route is None:
            self._block(flow, None, url, Verdict(False, "unknown source address"))
            return
        context, rules = route.context, route.rules
        method, path = flow.request.method, flow.request.path
        port = flow.request.port
        verdict = decide(rules, method, flow.request.host, path, port)
        header_host = (flow.request.host_header or "").rsplit(":", 1)[0].strip("[]")
        if verdict.allowed and header_host and header_host.lower() != flow.request.host.lower():
            verdict = decide(rules, method, header_host, path, port)  # no fronting past it
        if not verdict.allowed:
            self._block(flow, context, url, verdict)
            return
        _inject(flow, route.inject)
        _write_log(
            context, {"method": method, "url": url, "allowed": True, "reason": verdict.reason}
        )

    async def server_connect(self, data: Any) -> None:
        """Before dialling: resolve the name here and refuse non-public addresses no rule
        names (``decide_address``). (The connection is not pinned to the checked address:
        mitmproxy resolves again, so a rebinding DNS server with a zero TTL still has a
        window; pinning would change what TLS verification and SNI see upstream.)"""
        if data.server.address is None:
            return
        host, port = data.server.address
        route = self._route(data.client.peername[0]) if data.client.peername else None
        if route is None:
            data.server.error = "gateway-bot egress: unknown source address"
            return
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except OSError as exc:
            data.server.error = f"gateway-bot egress: cannot resolve {host}: {exc}"
            return
        addresses = [str(info[4][0]) for info in infos]
        for address in addresses:
            verdict = decide_address(route.rules, str(host), address)
            if not verdict.allowed:
                _write_log(
                    route.context,
                    {"method": "CONNECT", "url": f"{host}:{port}", "allowed": False,
                     "reason": verdict.reason},
                )  # fmt: skip
                data.server.error = f"Blocked by gateway-bot's egress proxy: {verdict.reason}"
                return

    def tcp_start(self, flow: tcp.TCPFlow) -> None:
        route = self._route(flow.client_conn.peername[0])
        host = str(flow.server_conn.address[0]) if flow.server_conn.address else "?"
        verdict = (
            Verdict(False, "unknown source address")
            if route is None
            else decide_raw_stream(
                route.rules, host, flow.server_conn.address[1] if flow.server_conn.address else None
            )
        )
        entry = {"method": "TCP", "url": host, "allowed": verdict.allowed, "reason": verdict.reason}
        _write_log(route.context if route else None, entry)
        if not verdict.allowed:
            flow.kill()

    def _route(self, address: str) -> Route | None:
        return self.routes.lookup(address)

    def _block(self, flow: http.HTTPFlow, context: str | None, url: str, verdict: Verdict) -> None:
        method = flow.request.method
        _write_log(
            context, {"method": method, "url": url, "allowed": False, "reason": verdict.reason}
        )
        flow.response = http.Response.make(
            403,
            f"Blocked by gateway-bot's egress proxy: {verdict.reason}.\n"
            "Allowed hosts are listed in the repo's .gateway/network-allowlist.yaml.\n",
            {"Content-Type": "text/plain; charset=utf-8", "X-Gateway-Bot-Blocked": verdict.reason},
        )


def _inject(flow: http.HTTPFlow, injections: tuple[HeaderInjection, ...]) -> None:
    """Set each credential header whose origin this request goes to, replacing whatever the
    agent sent there (its placeholder). Every other request passes untouched. Values are
    never logged. TRACE never gets one: a server answering it echoes the headers back."""
    request = flow.request
    if request.method.upper() == "TRACE":
        return
    sni = flow.client_conn.sni if request.scheme == "https" else None
    for injection in injections:
        if injection.applies(request.scheme, request.host, request.port, request.host_header, sni):
            request.headers[injection.header] = injection.value


def _write_log(context: str | None, entry: dict[str, Any]) -> None:
    name = context if context else "_unknown"
    line = {"time": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"), **entry}
    try:
        with (LOGS / f"{name}.log").open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")
    except OSError as exc:
        log.warning("cannot write the network log of %s: %s", name, exc)


addons = [EgressAllowlist()]
