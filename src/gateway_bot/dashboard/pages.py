"""The dashboard's pages and actions. Every answer is a template rendering of what the
application API says; actions go through the same API the chat commands use (stop as
``/stop`` does, decisions as a card's button does)."""

from __future__ import annotations

import time
from typing import Any

import aiohttp_jinja2
from aiohttp import web

from gateway_bot.core.application import Application
from gateway_bot.core.schedules.rules import show_time
from gateway_bot.dashboard import charts
from gateway_bot.dashboard.context import APPLICATION, CSRF, SETTINGS
from gateway_bot.dashboard.views import age, find_conversation, size, task_rows, when

CONVERSATION_TIMELINES = 10
"""A conversation's page shows the timelines of its newest this many tasks."""


def add_routes(app: web.Application) -> None:
    app.router.add_get("/", front)
    app.router.add_get("/tasks", tasks_page)
    app.router.add_post("/tasks/{task_id}/stop", stop_task)
    app.router.add_get("/conversations", conversations_page)
    app.router.add_get("/conversations/{conversation_id}", conversation_page)
    app.router.add_get("/channels", channels_page)
    app.router.add_get("/schedules", schedules_page)
    app.router.add_get("/charts", charts_page)


def render(request: web.Request, template: str, status: int = 200, **context: Any) -> web.Response:
    context.setdefault("csrf", request.get(CSRF, ""))
    context.setdefault("when", when)
    return aiohttp_jinja2.render_template(template, request, context, status=status)


def _application(request: web.Request) -> Application:
    return request.app[APPLICATION]


# -- pages -------------------------------------------------------------------------------


async def front(request: web.Request) -> web.Response:
    raise web.HTTPFound("/tasks")


async def tasks_page(request: web.Request) -> web.Response:
    rows = await task_rows(_application(request))
    return render(request, "tasks.html", rows=rows, live=True)


async def conversations_page(request: web.Request) -> web.Response:
    conversations = await _application(request).conversations(limit=200)
    return render(request, "conversations.html", conversations=conversations)


async def conversation_page(request: web.Request) -> web.Response:
    application = _application(request)
    conversation_id = request.match_info["conversation_id"]
    conversation = await find_conversation(application, conversation_id)
    if conversation is None:
        return render(request, "result.html", status=404, message="No such conversation.")
    rows = await task_rows(application, conversation_id=conversation_id)
    timelines = [await application.task_timeline(row.id) for row in rows[:CONVERSATION_TIMELINES]]
    containers_error = ""
    try:
        containers = await application.conversation_containers(conversation_id)
    except Exception as exc:  # the sandbox's trouble must not hide the conversation
        containers, containers_error = [], f"{type(exc).__name__}: {exc}"
    network = await application.network_log(conversation_id)
    pending = {d.code: d for d in await application.pending_decisions()}
    return render(
        request,
        "conversation.html",
        conversation=conversation,
        rows=rows,
        timelines=timelines,
        containers=containers,
        containers_error=containers_error,
        network=network,
        pending=pending,
        operators=request.app[SETTINGS].operator,
        age=age,
        size=size,
    )


async def channels_page(request: web.Request) -> web.Response:
    overview = await _application(request).overview()
    return render(request, "channels.html", overview=overview)


async def schedules_page(request: web.Request) -> web.Response:
    """Every schedule, active or paused, with its next run in its own zone (decision 0068)."""
    schedules = await _application(request).schedules()
    return render(request, "schedules.html", schedules=schedules, show_time=show_time)


async def charts_page(request: web.Request) -> web.Response:
    page = await charts.page(_application(request), time.time())
    return render(request, "charts.html", page=page)


# -- actions -----------------------------------------------------------------------------


async def stop_task(request: web.Request) -> web.Response:
    task_id = request.match_info["task_id"]
    try:
        outcome = await _application(request).stop_task(task_id)
    except KeyError:
        return render(request, "result.html", status=404, message=f"There is no task {task_id}.")
    return render(request, "result.html", message=outcome.text)
