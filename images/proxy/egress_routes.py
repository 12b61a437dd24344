"""What the egress proxy knows of its conversations: ``routes.json`` (source address ->
context, rules, credentials; written by the daemon only) and where each one's network log is.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
from pathlib import Path
from typing import Any

from gwb_egress.rules import (  # type: ignore[import-not-found]  # the daemon's package
    EgressRule,
    HeaderInjection,
    rules_from_json,
)

EGRESS_DIR = Path(os.environ.get("GATEWAY_BOT_EGRESS_DIR", "/egress"))
ROUTES = EGRESS_DIR / "routes.json"
LOGS = EGRESS_DIR / "logs"
READY = LOGS / "ready"
ASKS = EGRESS_DIR / "asks.sock"
LISTENING = LOGS / "listening.json"

log = logging.getLogger("gateway-bot-egress")


class Route:
    """What the proxy knows of one source address."""

    def __init__(
        self,
        context: str,
        rules: tuple[EgressRule, ...],
        inject: tuple[HeaderInjection, ...],
        ask_timeout_s: float = 600.0,
        listen: str | None = None,
    ) -> None:
        self.listen = listen
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
            str(entry["listen"]) if entry.get("listen") else None,
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

    def listen_addresses(self) -> set[str]:
        """The proxy's own address on each context's network (a listener each)."""
        self._reload()
        return {route.listen for route in self._sources.values() if route.listen}

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


def write_log(context: str | None, entry: dict[str, Any]) -> None:
    name = context if context else "_unknown"
    line = {"time": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"), **entry}
    try:
        with (LOGS / f"{name}.log").open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")
    except OSError as exc:
        log.warning("cannot write the network log of %s: %s", name, exc)


def write_json(path: Path, data: Any) -> None:
    """Replace ``path`` whole (a reader never sees half of it)."""
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data))
    partial.replace(path)
