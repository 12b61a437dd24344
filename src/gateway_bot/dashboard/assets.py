"""The dashboard's static files: its own stylesheet, scripts and icons, and the vendored libraries
it is built on (``static/vendor/``: Pico CSS, htmx with its server-sent-events extension,
Chart.js), served by the daemon itself so the dashboard works with no network beyond it.

Each file is read once, at import, from the package; the paths are fixed (no file name
from a request reaches the file system). The guard lets anyone fetch them: the login page
is styled with them before anyone is logged in, and none of them holds a secret.
"""

from __future__ import annotations

import re
import urllib.parse
from importlib import resources
from typing import Any

from aiohttp import web

ICONS = (
    "checkbox", "chevron", "close", "date", "invalid", "invalid-dark", "loading", "minus",
    "search", "time", "valid", "valid-dark",
)  # fmt: skip
"""Pico's icons, which it carries as data: URLs the CSP (``img-src 'self'``) refuses: the
same drawings as files (``static/icons/``), which the served Pico names instead
(``_pico_with_icon_files``)."""
_DATA_SVG = re.compile(r'url\("data:image/svg\+xml,([^"]*)"\)')
_FILES = {
    "style.css": "text/css",
    "charts.js": "text/javascript",
    "favicon.svg": "image/svg+xml",
    "vendor/pico.min.css": "text/css",
    "vendor/htmx.min.js": "text/javascript",
    "vendor/htmx-sse.min.js": "text/javascript",
    "vendor/chart.umd.min.js": "text/javascript",
    **{f"icons/{name}.svg": "image/svg+xml" for name in ICONS},
}
STATIC_PATHS = frozenset(f"/static/{name}" for name in _FILES)
"""What the guard serves to anyone."""


def add_routes(app: web.Application) -> None:
    for name, content_type in _FILES.items():
        app.router.add_get(f"/static/{name}", _serve(name, content_type))


def _serve(name: str, content_type: str) -> Any:
    body = resources.files("gateway_bot.dashboard").joinpath("static", *name.split("/"))
    data = body.read_bytes()
    if name == "vendor/pico.min.css":
        data = _pico_with_icon_files(data.decode()).encode()

    async def serve(request: web.Request) -> web.Response:
        return web.Response(body=data, content_type=content_type, charset="utf-8")

    return serve


def _pico_with_icon_files(css: str) -> str:
    """Pico as served: each of its data: URL icons replaced by the file with the same
    drawing. An override in style.css was not enough: a page whose style.css came late or
    not at all (a busy machine) fetched Pico's own, which the CSP refused. The vendored
    file stays as published; an icon with no file (a Pico upgrade) raises at start."""
    static = resources.files("gateway_bot.dashboard").joinpath("static", "icons")
    drawings = {_drawing(static.joinpath(f"{name}.svg").read_text()): name for name in ICONS}

    def to_file(match: re.Match[str]) -> str:
        drawing = _drawing(urllib.parse.unquote(match.group(1)))
        if drawing not in drawings:
            raise ValueError(f"a Pico icon with no file in static/icons/: {drawing[:80]}")
        return f'url("/static/icons/{drawings[drawing]}.svg")'

    return _DATA_SVG.sub(to_file, css)


def _drawing(svg: str) -> str:
    return " ".join(svg.replace('"', "'").split())
