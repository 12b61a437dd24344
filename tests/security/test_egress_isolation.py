"""One conversation attacks the egress proxy every conversation shares; another works on.

Conversation ``a`` sends a 700 MB body to a blocked host, dribbles request headers a byte at
a time on dozens of connections, sends 100 KB of headers and opens a thousand connections,
all at once, while conversation ``b`` keeps making ordinary requests through the same
proxy. ``b``'s requests all succeed and the proxy never restarts; ``a`` is cut off by its
own limits (431, 408, connections refused). How much ``b`` slowed down is a benchmark's
question, not this test's (``bench``): here only what ``b`` sees.
"""

from __future__ import annotations

import resource
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from gateway_bot.sandbox.egress.rules import EgressRule
from tests.support.egress_rig import PROXY_PORT, ProxyRig, Reply, send_raw

FLOOD = 1000
DRIBBLERS = 40
HEAD_DEADLINE_S = 10
"""The proxy's limit on sending a request head (``egress_flow.HEAD_DEADLINE_S``)."""


def _get(url: str) -> bytes:
    host = url.split("/")[2]
    return f"GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()


def _dribble(address: str, stop: threading.Event) -> Reply:
    """A request head sent a byte every half second, until the proxy answers or closes."""
    head = b"GET http://blocked.example.test/ HTTP/1.1\r\nX-Slow: " + b"a" * 200
    with socket.create_connection((address, PROXY_PORT), 30) as client:
        client.settimeout(0.5)
        for byte in head:
            if stop.is_set():
                break
            try:
                client.sendall(bytes([byte]))
                answer = client.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return Reply(0, {}, b"", True)
            if answer:
                return Reply(int(answer.split()[1]), {}, answer, True)
            return Reply(0, {}, b"", True)  # closed without a word
    return Reply(-1, {}, b"")


def _flood(address: str, count: int) -> tuple[list[socket.socket], int]:
    """Open ``count`` connections and keep them; how many the proxy shut at once."""
    kept, shut = [], 0
    for _ in range(count):
        try:
            kept.append(socket.create_connection((address, PROXY_PORT), 5))
        except OSError:
            shut += 1
    time.sleep(0.5)  # let the proxy refuse what it refuses
    for client in kept:
        client.settimeout(0.01)
        try:
            if client.recv(1) == b"":
                shut += 1
        except (TimeoutError, OSError):
            pass
    return kept, shut


def test_one_conversation_cannot_take_the_others_network_down(proxy_rig: ProxyRig) -> None:
    rig, up = proxy_rig, proxy_rig.upstreams
    app = f"http://{up.host}:{up.app_port}"
    rig.route([])
    rig.route([EgressRule(up.host, ports=(up.app_port,))], conversation="b")
    started = rig.proxy_state()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, FLOOD + 1024), hard))
    attacker = rig.conversations["a"].proxy
    stop = threading.Event()
    seen_by_b: list[tuple[int, float]] = []

    def work_as_b() -> None:
        while not stop.is_set():
            began = time.monotonic()
            reply = rig.send(_get(f"{app}/pub/{len(seen_by_b)}"), conversation="b")
            seen_by_b.append((reply.status, time.monotonic() - began))
            stop.wait(0.05)  # a working task's pace, well inside its own limits

    with ThreadPoolExecutor(DRIBBLERS + 4) as pool:
        try:
            b = pool.submit(work_as_b)
            huge = pool.submit(
                rig.send,
                b"POST http://blocked.example.test/upload HTTP/1.1\r\n"
                b"Host: blocked.example.test\r\nContent-Length: 734003200\r\n\r\n",
                body_chunks=700,
            )
            assert huge.result(60).status == 403
            dribblers = [pool.submit(_dribble, attacker, stop) for _ in range(DRIBBLERS)]
            big_head = rig.send(
                b"GET http://blocked.example.test/ HTTP/1.1\r\nX-Big: "
                + b"a" * 100_000
                + b"\r\n\r\n"
            )
            assert big_head.status == 431, big_head
            kept, shut = _flood(attacker, FLOOD)
            try:
                assert shut >= FLOOD - 64, f"only {shut} of {FLOOD} connections were refused"
                slow = [d.result(HEAD_DEADLINE_S + 20) for d in dribblers]
            finally:
                for client in kept:
                    client.close()
            stop.set()
            b.result(30)
        finally:
            stop.set()
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    assert [s for s in slow if s.status == 408], [s.status for s in slow]
    assert all(s.status in (408, 0) for s in slow), [s.status for s in slow]
    print(
        "B_TIMES",
        len(seen_by_b),
        sorted(t for _, t in seen_by_b)[len(seen_by_b) // 2],
        max(t for _, t in seen_by_b),
    )
    assert len(seen_by_b) >= 10
    failed = [(n, status) for n, (status, _) in enumerate(seen_by_b) if status != 200]
    assert not failed, f"{failed} of {len(seen_by_b)} requests"
    assert rig.proxy_state() == started, "the proxy restarted"
    # And afterwards the attacker's own ordinary requests work again (its limits are its).
    rig.route([EgressRule(up.host, ports=(up.app_port,))])
    assert send_raw(attacker, PROXY_PORT, _get(f"{app}/pub/after")).status == 200
