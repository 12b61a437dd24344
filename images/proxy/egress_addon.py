"""mitmproxy addon: gateway-bot's egress allowlist, one shared proxy for every conversation.

Runs inside the proxy container (``/egress`` is a directory the daemon shares with it,
read-only but for ``/egress/logs``). Each conversation's container sits alone on its own
internal network with a fixed address; the daemon writes ``/egress/routes.json`` mapping that
source address to the conversation's execution context, allowlist and injected credentials.
So the source address of a connection says whose request it is, which rules apply, which
log gets the line (``/egress/logs/<context>.log``, linked as ``network.log`` beside the
conversation's ``events.jsonl``) and which credential header its requests to the model API
get (the agent only holds a placeholder; no other host ever sees the real value).

Every decision is made when a request's headers are in (``requestheaders``), on the one
reading of its target the daemon shares (``gwb_egress.target``, ``gwb_egress.rules.judge``):
what servers read in more than one way is a 400, what the rules refuse a 403, both with the
reason and before anything is dialled or any of the body read (``egress_flow``). What goes,
goes in its normal form, and its body streams through, never kept.

A request the allow rules let out that matches an ask rule (default: every git push over
HTTP) is held: its first MB is kept for the card (reading stops there), and the hook awaits
the daemon's answer on ``/egress/asks.sock`` (``egress_asking``) while other flows go on.
Nothing is dialled before the answer. A refusal (the daemon said no, did not answer in time,
or is not there) is a 403 with the reason, or for a git push the rejection git prints per
ref. Per-source limits (``egress_flow.SourceLimits``) keep one conversation from using up
the proxy the others share.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Any

import egress_flow  # type: ignore[import-not-found]  # beside this file
from egress_asking import MAX_ASK_BODY, ask_daemon, inflated  # type: ignore[import-not-found]
from egress_routes import (  # type: ignore[import-not-found]  # beside this file
    LISTENING,
    LOGS,
    READY,
    Route,
    Routes,
    write_json,
    write_log,
)
from gwb_egress.git_push import (  # type: ignore[import-not-found]  # the daemon's package
    is_empty_push,
    parse_push,
    refusal_report,
)
from gwb_egress.rules import (  # type: ignore[import-not-found]
    ASK,
    REFUSE,
    HeaderInjection,
    Verdict,
    decide_address,
    decide_connect,
    decide_raw_stream,
    judge,
)
from gwb_egress.target import (  # type: ignore[import-not-found]
    AmbiguousTarget,
    RequestTarget,
    read_target,
)
from mitmproxy import connection, ctx, http, tcp  # type: ignore[import-not-found]

BODY_HEAD_WAIT_S = 10
"""How long a held request's first MB may take to arrive before the card goes without it."""
LOG_EVERY_S = 5.0
"""A source's refused connections are logged at most this often (a flood writes no flood)."""

log = logging.getLogger("gateway-bot-egress")


class EgressAllowlist:
    def __init__(self) -> None:
        self.routes = Routes()
        self.limits = egress_flow.SourceLimits()
        self._counted: set[str] = set()
        self._logged: dict[str, float] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def running(self) -> None:
        egress_flow.patch()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(egress_flow.sweep_slow_heads()),
            loop.create_task(self._follow_listeners()),
        ]
        LOGS.mkdir(parents=True, exist_ok=True)
        READY.write_text(f"{os.getpid()}\n")

    async def _follow_listeners(self) -> None:
        """One listener per context network, at the proxy's address there (``listen`` in
        its route): a conversation flooding the proxy with connections fills its own
        listener's queue, and the others' connections are still accepted. Followed every
        quarter second; ``LISTENING`` says which addresses are served."""
        current: set[str] | None = None
        while True:
            try:
                wanted = self.routes.listen_addresses()
                if wanted != current:
                    port = ctx.options.listen_port or 8080
                    modes = [f"regular@127.0.0.1:{port}"]
                    modes += [f"regular@{address}:{port}" for address in sorted(wanted)]
                    ctx.options.update(mode=modes)
                    await ctx.master.addons.get("proxyserver").setup_servers()
                    write_json(LISTENING, sorted(wanted))
                    current = wanted
            except Exception:  # a bad route must not end the following
                log.exception("could not update the proxy's listeners")
            await asyncio.sleep(0.25)

    def client_connected(self, client: connection.Client) -> None:
        """Per-source limits before anything is read: a conversation that floods the proxy
        with connections is refused its own new ones, the others' go on."""
        source = _source(client.peername[0])
        refused = self.limits.connect(source)
        if refused is None:
            self._counted.add(client.id)
            return
        client.error = f"gateway-bot egress: {refused}"
        now = asyncio.get_running_loop().time()
        if now - self._logged.get(source, -LOG_EVERY_S) >= LOG_EVERY_S:
            self._logged[source] = now
            route = self._route(source)
            write_log(
                route.context if route else None,
                {"method": "CONNECT", "url": f"from {source}", "allowed": False,
                 "reason": f"connection refused: {refused}"},
            )  # fmt: skip

    def client_disconnected(self, client: connection.Client) -> None:
        if client.id in self._counted:
            self._counted.discard(client.id)
            self.limits.disconnect(_source(client.peername[0]))

    def http_connect(self, flow: http.HTTPFlow) -> None:
        route = self._route(flow.client_conn.peername[0])
        host, port = flow.request.host, flow.request.port
        if route is None:
            self._block(flow, None, f"{host}:{port}", Verdict(False, "unknown source address"))
            return
        verdict = decide_connect(route.rules, host, port)
        if not verdict.allowed:
            self._block(flow, route.context, f"{host}:{port}", verdict)

    async def requestheaders(self, flow: http.HTTPFlow) -> None:
        """The whole decision, before any of the body is read: the target read once
        (``read_target``), judged once (``judge``), the normal form forwarded; a refusal
        answered without reading the body; a held request's first MB kept for the card.
        A failure here refuses (mitmproxy would forward a request whose hook raised)."""
        if flow.response is not None or flow.request.method == "CONNECT":
            return
        try:
            await self._decide(flow)
        except Exception as exc:  # fail closed, whatever went wrong
            log.exception("refusing a request the addon could not decide")
            if flow.response is None and flow.killable:
                verdict = Verdict(False, f"the egress proxy could not decide: {type(exc).__name__}")
                self._block(flow, None, _shown(flow.request), verdict, status=500)

    async def _decide(self, flow: http.HTTPFlow) -> None:
        request = flow.request
        route = self._route(flow.client_conn.peername[0])
        if route is None:
            self._block(flow, None, request.pretty_url, Verdict(False, "unknown source address"))
            return
        if not self.limits.request(_source(flow.client_conn.peername[0])):
            why = f"more than {egress_flow.REQUESTS_PER_S:g} requests a second"
            self._block(flow, route.context, request.pretty_url, Verdict(False, why), status=429)
            return
        try:
            target = _read(flow)
        except AmbiguousTarget as exc:
            self._block(flow, route.context, _shown(request), Verdict(False, str(exc)), 400)
            return
        judgement = judge(route.rules, target)
        if judgement.action == REFUSE:
            verdict = Verdict(False, judgement.reason)
            self._block(flow, route.context, target.url, verdict, status=judgement.status)
            return
        _forward_as(flow, target)
        reason = judgement.reason
        if judgement.action == ASK:
            head = egress_flow.BodyHead(flow, MAX_ASK_BODY)
            body = await head.wait(BODY_HEAD_WAIT_S) if egress_flow.has_body(request) else b""
            push = target.path.endswith("/git-receive-pack")
            if push and head.complete and is_empty_push(body):
                head.forget()  # git's probe before a big push: it changes nothing
            else:
                size = int(request.headers.get("content-length", "0") or 0) or head.size
                allowed, why = await ask_daemon(flow, route, judgement.rule, target, body, size)
                if not allowed:
                    head.forget()
                    _refuse(flow, route.context, target, why, body)
                    return
                reason = f"approved: {why}"
            head.resume()
        request.stream = True  # allowed: the body goes through as it comes, never kept
        _inject(flow, route.inject)
        write_log(
            route.context,
            {"method": target.method, "url": target.url, "allowed": True, "reason": reason},
        )

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None:
            flow.response.stream = True  # answers stream too: a big download is never kept

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        if flow.websocket is not None:
            del flow.websocket.messages[:-1]  # mitmproxy keeps every message otherwise

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
                write_log(
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
        write_log(route.context if route else None, entry)
        if not verdict.allowed:
            flow.kill()

    def _route(self, address: str) -> Route | None:
        return self.routes.lookup(address)

    def _block(
        self,
        flow: http.HTTPFlow,
        context: str | None,
        url: str,
        verdict: Verdict,
        status: int = 403,
    ) -> None:
        method = flow.request.method
        write_log(
            context, {"method": method, "url": url, "allowed": False, "reason": verdict.reason}
        )
        header = verdict.reason.encode("ascii", "replace").decode("ascii")
        response = http.Response.make(
            status,
            f"Blocked by gateway-bot's egress proxy: {verdict.reason}.\n"
            "Allowed hosts are listed in the repo's .gateway/network-allowlist.yaml.\n",
            {"Content-Type": "text/plain; charset=utf-8", "X-Gateway-Bot-Blocked": header},
        )
        _answer(flow, response)


def _answer(flow: http.HTTPFlow, response: http.Response) -> None:
    """Answer now: with no body to come, as mitmproxy answers; else without reading the body
    (``egress_flow.refuse_before_body``, the connection closed after the answer)."""
    if flow.request.method == "CONNECT" or not egress_flow.has_body(flow.request):
        flow.response = response
    else:
        egress_flow.refuse_before_body(flow, response)


def _source(address: str) -> str:
    return address[len("::ffff:") :] if address.startswith("::ffff:") else address


def _read(flow: http.HTTPFlow) -> RequestTarget:
    """The one reading of this request (``target.read_target``): where it goes, its Host
    header (exactly one) or HTTP/2 authority, and inside a TLS tunnel its server name."""
    request = flow.request
    hosts = request.headers.get_all("host")
    if len(hosts) > 1:
        raise AmbiguousTarget("more than one Host header")
    authority = request.authority if (request.is_http2 or request.is_http3) else ""
    if authority and hosts and authority != hosts[0]:
        raise AmbiguousTarget("the :authority and the Host header name different hosts")
    sni = flow.client_conn.sni if request.scheme == "https" else None
    return read_target(
        request.method,
        request.data.path.decode("utf-8", "surrogateescape"),
        scheme=request.scheme,
        host=request.host,
        port=request.port,
        host_header=authority or (hosts[0] if hosts else None),
        server_name=sni,
    )


def _forward_as(flow: http.HTTPFlow, target: RequestTarget) -> None:
    """Send the server the normal form that was judged, not the spelling the client chose."""
    request = flow.request
    request.method = target.method
    request.path = target.origin_form
    request.host = target.host
    if "host" in request.headers:
        request.headers["host"] = target.authority


def _shown(request: http.Request) -> str:
    """A request that could not be read, for the log: printable and bounded."""
    text = f"{request.scheme}://{request.host}:{request.port}" + request.data.path.decode(
        "ascii", "backslashreplace"
    )
    return "".join(ch if ch.isprintable() else "?" for ch in text)[:2000]


def _refuse(
    flow: http.HTTPFlow, context: str, target: RequestTarget, why: str, body: bytes
) -> None:
    """A held request that may not go: git gets a per-ref rejection it prints (a bare 403
    on the push would show only "RPC failed; HTTP 403"), anything else a 403."""
    reason = f"not approved: {why}"
    write_log(
        context, {"method": target.method, "url": target.url, "allowed": False, "reason": reason}
    )
    header = reason.encode("ascii", "replace").decode("ascii")
    report = None
    if target.path.endswith("/git-receive-pack"):
        report = refusal_report(parse_push(inflated(flow.request, body)), f"gateway-bot: {reason}")
    if report is not None:
        response = http.Response.make(
            200,
            report,
            {"Content-Type": "application/x-git-receive-pack-result",
             "Cache-Control": "no-cache", "X-Gateway-Bot-Blocked": header},
        )  # fmt: skip
    else:
        response = http.Response.make(
            403,
            f"Blocked by gateway-bot's egress proxy: {reason}.\n",
            {"Content-Type": "text/plain; charset=utf-8", "X-Gateway-Bot-Blocked": header},
        )
    _answer(flow, response)


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


addons = [EgressAllowlist()]
