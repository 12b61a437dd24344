"""A task's page (``/tasks/<id>``): the task as a waterfall, every step on one time axis
with its start and duration, the slowest marked in words as well as in colour
(``core/conversations/trace.py`` builds it; ``/metrics``' step histogram counts the same).

The bars are SVG rectangles placed by their ``x`` and ``width`` attributes: presentation
attributes, not styles, so the CSP's ``style-src 'self'`` (no inline style) allows them."""

from __future__ import annotations

import time

from aiohttp import web

from gateway_bot.core.conversations.trace import seconds_text
from gateway_bot.dashboard.context import APPLICATION
from gateway_bot.dashboard.pages import render


def add_routes(app: web.Application) -> None:
    app.router.add_get("/tasks/{task_id}", task_page)


async def task_page(request: web.Request) -> web.Response:
    task_id = request.match_info["task_id"]
    try:
        trace = await request.app[APPLICATION].task_trace(task_id, time.time())
    except KeyError:
        return render(request, "result.html", status=404, message=f"There is no task {task_id}.")
    return render(request, "task.html", trace=trace, seconds=seconds_text)
