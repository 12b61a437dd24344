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
from gateway_bot.dashboard import charts, lists
from gateway_bot.dashboard.context import APPLICATION, CSRF, SETTINGS
from gateway_bot.dashboard.views import (
    LIVE_TASKS,
    age,
    conversation_rows,
    find_conversation,
    front_view,
    size,
    task_list,
    task_rows,
    when,
)

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
    """The overview: what runs and waits now, today's and the week's figures, the
    channels and containers, each linking to its detail."""
    view = await front_view(_application(request), time.time())
    return render(request, "overview.html", view=view, age=age, size=size)


async def tasks_page(request: web.Request) -> web.Response:
    """Filtered by the query's fields, newest first, a page at a time; the first page
    follows changes live (its stream re-renders the same filters), an older one stays."""
    filters, which = lists.task_filter(request.query)
    after = lists.read_cursor(request.query.get("after", ""))
    rows, following = await task_list(_application(request), which, after=after)
    shown = filters.query(after=lists.write_cursor(after)) if after else filters.query()
    return _clean_url(
        request,
        "/tasks",
        shown,
        render(
            request,
            "tasks.html",
            rows=rows,
            filters=filters,
            channels=_channel_names(request),
            states=lists.STATE_WORDS,
            streaming=after is None,
            newer=after is not None,
            older=filters.query(after=lists.write_cursor(following)) if following else "",
            page_size=LIVE_TASKS,
        ),
    )


async def conversations_page(request: web.Request) -> web.Response:
    filters, which = lists.conversation_filter(request.query)
    offset = lists.read_offset(request.query.get("offset", ""))
    rows, more = await conversation_rows(_application(request), which, offset=offset)
    shown = filters.query(offset=str(offset) if offset else "")
    return _clean_url(
        request,
        "/conversations",
        shown,
        render(
            request,
            "conversations.html",
            conversations=rows,
            filters=filters,
            channels=_channel_names(request),
            states=lists.CONVERSATION_STATES,
            newer=filters.query(offset=str(max(0, offset - LIVE_TASKS))) if offset else None,
            older=filters.query(offset=str(offset + LIVE_TASKS)) if more else "",
        ),
    )


def _clean_url(request: web.Request, path: str, query: str, response: web.Response) -> web.Response:
    """A list sent by htmx goes into the address bar as its filters, without the form's
    empty fields (``?q=word``, not ``?state=&channel=&...&q=word``)."""
    if "HX-Request" in request.headers:
        response.headers["HX-Push-Url"] = f"{path}?{query}" if query else path
    return response


def _channel_names(request: web.Request) -> list[str]:
    return [channel.name for channel in _application(request).channels()]


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
