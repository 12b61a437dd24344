"""How often a client may try the login token: a few free tries, then a wait that doubles
with each further wrong token. While a client waits, its attempts are answered "too many
attempts" without the token being looked at, so the right token found by a search that
ran ahead is refused too, and nothing tells the searcher it was right.

A client is the socket's peer address (headers are not read: ``X-Forwarded-For`` is the
client's to write). Behind a proxy every client is the proxy, so there the limit is shared
by everyone: a searcher then also delays the operator's login, which is the price of not
trusting a header; the wait is bounded (``MAX_WAIT_S``) and a right login resets it.

Kept in memory, not in the store: what it remembers matters for minutes; a restart of the
daemon forgets it, which an attacker cannot cause; each replica counts its own clients.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

FREE_FAILURES = 5
"""Wrong tokens a client may send before it has to wait (typos happen)."""
FIRST_WAIT_S = 1.0
MAX_WAIT_S = 900.0
CLIENTS_KEPT = 10_000
"""Most clients remembered at once; the one seen longest ago is forgotten first."""


@dataclass
class _Client:
    failures: int = 0
    blocked_until: float = 0.0
    seen_at: float = 0.0


class LoginLimits:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._clients: OrderedDict[str, _Client] = OrderedDict()

    def wait_s(self, client: str) -> float:
        """How long ``client`` must wait before its next attempt is looked at (0: now)."""
        known = self._clients.get(client)
        if known is None:
            return 0.0
        return max(0.0, known.blocked_until - self._clock())

    def failed(self, client: str) -> float:
        """Note a wrong token; returns the wait it earned (0 within the free tries)."""
        now = self._clock()
        known = self._clients.pop(client, None) or _Client()
        if now - known.seen_at > MAX_WAIT_S and known.blocked_until <= now:
            known = _Client()  # long quiet: start again
        known.failures += 1
        known.seen_at = now
        over = known.failures - FREE_FAILURES
        wait = 0.0 if over <= 0 else min(MAX_WAIT_S, FIRST_WAIT_S * 2 ** min(over - 1, 32))
        known.blocked_until = now + wait
        self._clients[client] = known
        while len(self._clients) > CLIENTS_KEPT:
            self._clients.popitem(last=False)
        return wait

    def succeeded(self, client: str) -> None:
        self._clients.pop(client, None)
