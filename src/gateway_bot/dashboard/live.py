"""The live stream (server-sent events): every task state change as a ``change`` event
(JSON), then the tasks table rendered again as a ``tasks`` event, which the tasks page
swaps in without a reload: htmx's server-sent-events extension does the swapping
(``sse-connect`` and ``sse-swap`` in tasks.html), so the page carries no script of its own.
The stream's query is the page's filters (``dashboard/lists.py``): the rows it sends are
the first page of that same list. Its first event, ``hello``, is the line the page shows
while it is connected ("Live.").

The rows are rendered here, by the same template and autoescaping as the page, so the
browser only ever inserts server-escaped HTML. A burst of changes is answered with one
table; a ``Missed`` marker from the feed (this stream fell behind) just re-renders it, since
the table is re-read from the application API anyway.

A stream lives as long as the login it was opened with: every ``SESSION_CHECK_S`` it asks
whether the session still exists, and ends when it was logged out (here or "everywhere",
or by another replica), went idle or expired. The check counts as use: an open tasks page
keeps its login alive until ``session_hours``.

On connecting, the stream first sends the table as it is then: a change between the page's
rendering and the stream's subscription would otherwise never reach that page (a task shown
"executing" after it completed, found by the browser tests).
"""

from __future__ import annotations

import asyncio
import json

import aiohttp_jinja2
from aiohttp import web
from aiohttp_sse import EventSourceResponse, sse_response

from gateway_bot.core.feed import FeedItem, Subscription, TaskChange
from gateway_bot.dashboard import lists
from gateway_bot.dashboard.context import APPLICATION, CSRF, FEED, SESSION, SESSIONS, STREAMS
from gateway_bot.dashboard.views import task_list

SESSION_CHECK_S = 30.0
LIVE = "Live."


def change_json(change: TaskChange) -> str:
    return json.dumps(
        {
            "task_id": change.task_id,
            "channel": change.channel,
            "conversation_id": change.conversation_id,
            "previous": change.previous.value if change.previous else None,
            "state": change.state.value,
            "completion_reason": (
                change.completion_reason.value if change.completion_reason else None
            ),
            "at": change.at,
        }
    )


async def events(request: web.Request) -> web.StreamResponse:
    """Ends when the daemon stops (the feed closes the subscription) or the browser goes
    (a failed send, or the stream's keep-alive ping failing), whichever comes first: a
    closed tab must not keep a subscription until the next change."""
    streams = request.app[STREAMS]
    subscription = request.app[FEED].subscribe()
    streams.add(subscription)
    try:
        async with sse_response(request) as stream:
            await stream.send(LIVE, event="hello")
            await stream.send(await _rows_html(request), event="tasks")
            forwarding = asyncio.create_task(_forward(request, stream, subscription))
            gone = asyncio.create_task(stream.wait())
            ended = asyncio.create_task(_session_ended(request))
            watched = (forwarding, gone, ended)
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            for task in watched:
                task.cancel()
            for outcome in await asyncio.gather(*watched, return_exceptions=True):
                if isinstance(outcome, Exception) and not isinstance(outcome, ConnectionResetError):
                    raise outcome
        return stream
    finally:
        subscription.close()
        streams.discard(subscription)


async def _forward(
    request: web.Request, stream: EventSourceResponse, subscription: Subscription
) -> None:
    async for item in subscription:
        burst: list[FeedItem] = [item, *subscription.pending()]
        for change in burst:
            if isinstance(change, TaskChange):
                await stream.send(change_json(change), event="change")
        await stream.send(await _rows_html(request), event="tasks")


async def _session_ended(request: web.Request) -> None:
    """Returns once the stream's session is over."""
    book, session = request.app[SESSIONS], request[SESSION]
    while True:
        await asyncio.sleep(SESSION_CHECK_S)
        if await book.find_again(session) is None:
            return


async def _rows_html(request: web.Request) -> str:
    filters, which = lists.task_filter(request.query)
    rows, _ = await task_list(request.app[APPLICATION], which)
    return aiohttp_jinja2.render_string(
        "task_rows.html", request, {"rows": rows, "csrf": request[CSRF], "filters": filters}
    )
