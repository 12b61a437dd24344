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

A request the allow rules let out that matches an ask rule (default: every git push over
HTTP) is held: the hook awaits the daemon's answer on ``/egress/asks.sock`` (one connection
per request, see ``sandbox/podman/egress_asks.py``) while other flows go on. Nothing is
dialled before the answer. A refusal (the daemon said no, did not answer in time, or is not
there) is a 403 with the reason, or for a git push the rejection git prints per ref.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import logging
import os
import socket
import zlib
from pathlib import Path
from typing import Any

from egress_git_push import (  # type: ignore[import-not-found]  # copied beside this file
    is_empty_push,
    parse_push,
    refusal_report,
)
from egress_rules import (  # type: ignore[import-not-found]  # copied beside this file
    EgressRule,
    HeaderInjection,
    Verdict,
    ask_rule_for,
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
ASKS = EGRESS_DIR / "asks.sock"
MAX_ASK_BODY = 1024 * 1024
"""The daemon sees at most this much of a held body (a push's refs come first)."""
ANSWER_GRACE_S = 30
"""How much longer than the daemon's own timeout a held request waits for an answer."""

log = logging.getLogger("gateway-bot-egress")


class Route:
    """What the proxy knows of one source address."""

    def __init__(
        self,
        context: str,
        rules: tuple[EgressRule, ...],
        inject: tuple[HeaderInjection, ...],
        ask_timeout_s: float = 600.0,
    ) -> None:
        self.context = context
        self.rules = rules
        self.inject = inject
        self.ask_timeout_s = ask_timeout_s

    @classmethod
    def from_json(cls, entry: dict[str, Any]) -> Route:
        return cls(
            str(entry["context"]),
            rules_from_json([*entry.get("rules", []), *entry.get("ask", [])]),
            tuple(HeaderInjection.from_json(item) for item in entry.get("inject", [])),
            float(entry.get("ask_timeout_s", 600.0)),
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

    async def request(self, flow: http.HTTPFlow) -> None:
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
        hosts = (flow.request.host, header_host)
        ask = ask_rule_for(rules, method, hosts, path, port)
        if ask is not None:
            body = _body_head(flow.request)
            if not (path.split("?", 1)[0].endswith("/git-receive-pack") and is_empty_push(body)):
                allowed, why = await _hold(flow, route, ask, body)
                if not allowed:
                    _refuse(flow, context, url, why, body)
                    return
                verdict = Verdict(True, f"approved: {why}")
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


def _body_head(request: http.Request) -> bytes:
    """The first ``MAX_ASK_BODY`` bytes of the body, decoded when it is compressed (inflated
    only that far: a small gzip bomb costs nothing)."""
    raw = request.raw_content or b""
    encoding = request.headers.get("content-encoding", "").strip().lower()
    if encoding in ("gzip", "x-gzip", "deflate"):
        try:
            return zlib.decompressobj(47).decompress(raw, MAX_ASK_BODY)  # gzip or zlib
        except zlib.error:
            return raw[:MAX_ASK_BODY]
    return raw[:MAX_ASK_BODY]


async def _hold(
    flow: http.HTTPFlow, route: Route, rule: EgressRule, body: bytes
) -> tuple[bool, str]:
    """Ask the daemon; (allowed, why). Every failure is a refusal that says what happened."""
    request = flow.request
    url = request.pretty_url
    _write_log(
        route.context,
        {"method": request.method, "url": url, "allowed": False, "held": True,
         "reason": f"held for approval ({rule.describe()})"},
    )  # fmt: skip
    ask = {
        "context": route.context,
        "method": request.method,
        "scheme": request.scheme,
        "host": request.host,
        "port": request.port,
        "path": request.path,
        "rule": rule.describe(),
        "body": base64.b64encode(body).decode("ascii"),
        "body_size": len(request.raw_content or b""),
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


def _refuse(flow: http.HTTPFlow, context: str, url: str, why: str, body: bytes) -> None:
    """A held request that may not go: git gets a per-ref rejection it prints (a bare 403
    on the push would show only "RPC failed; HTTP 403"), anything else a 403."""
    reason = f"not approved: {why}"
    _write_log(
        context, {"method": flow.request.method, "url": url, "allowed": False, "reason": reason}
    )
    header = reason.encode("ascii", "replace").decode("ascii")
    report = None
    if flow.request.path.split("?", 1)[0].endswith("/git-receive-pack"):
        report = refusal_report(parse_push(body), f"gateway-bot: {reason}")
    if report is not None:
        flow.response = http.Response.make(
            200,
            report,
            {"Content-Type": "application/x-git-receive-pack-result",
             "Cache-Control": "no-cache", "X-Gateway-Bot-Blocked": header},
        )  # fmt: skip
        return
    flow.response = http.Response.make(
        403,
        f"Blocked by gateway-bot's egress proxy: {reason}.\n",
        {"Content-Type": "text/plain; charset=utf-8", "X-Gateway-Bot-Blocked": header},
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
