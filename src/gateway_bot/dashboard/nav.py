"""What every page's header needs beyond the page itself: how many decisions wait, shown on
the Approvals link, so an operator on a phone sees there is something to decide and reaches
it in one tap (then a second tap decides: issue 32).

A middleware counts before the handler and the templates read the count through a global
function, rather than each page handler passing it: the pages are owned by different
modules, and a page that forgot would show no count. The count travels in a context
variable (the handler, and so the rendering, runs in the middleware's task), not in a
request field: aiohttp_jinja2's own context processors key the request with a string,
which aiohttp warns about. It is counted only for a logged-in page view (the guard, the
outer middleware, has set the CSRF token), not for the live stream, the metrics or a
form's answer: the count a form's answer would show is the one from before its decision,
so none is shown there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar

from aiohttp import web

from gateway_bot.dashboard.context import APPLICATION, CSRF

NOT_PAGES = ("/events", "/metrics", "/static/")
_PENDING: ContextVar[int | None] = ContextVar("pending_decisions", default=None)
_PATH: ContextVar[str] = ContextVar("page_path", default="")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def header(request: web.Request, handler: Handler) -> web.StreamResponse:
    count = None
    if _a_page_view(request):
        count = len(await request.app[APPLICATION].pending_decisions())
    pending, path = _PENDING.set(count), _PATH.set(request.path)
    try:
        return await handler(request)
    finally:
        _PENDING.reset(pending)
        _PATH.reset(path)


def _a_page_view(request: web.Request) -> bool:
    """A logged-in GET of a whole page (an htmx fragment has no header to show it in)."""
    return (
        request.method == "GET"
        and CSRF in request
        and not request.path.startswith(NOT_PAGES)
        and "HX-Request" not in request.headers
    )


def pending_count() -> int | None:
    """For the templates: decisions waiting (None where not counted)."""
    return _PENDING.get()


def page_path() -> str:
    """For the templates: the path being shown (the header marks its link)."""
    return _PATH.get()
