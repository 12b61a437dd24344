"""The approvals page and its buttons: every decision a person is waiting on, of every kind
(new senders, rooms, the agent's actions, network writes, questions, budgets, schedules
the agent proposes: ``core/decisions.py``), each a card with its own choices.

A press is recorded as the operator's identity on the decision's channel
(``dashboard.operator``): the owners' list (and, for the agent's actions, the
conversation's deciders) says whether that identity may, exactly as for a button in chat.
"""

from __future__ import annotations

from aiohttp import web

from gateway_bot.core.application import Application
from gateway_bot.core.decisions import PendingDecision
from gateway_bot.dashboard.context import APPLICATION, SETTINGS
from gateway_bot.dashboard.pages import render
from gateway_bot.dashboard.views import age


def add_routes(app: web.Application) -> None:
    app.router.add_get("/approvals", approvals_page)
    app.router.add_post("/approvals/{code}/decide", decide)


def _application(request: web.Request) -> Application:
    return request.app[APPLICATION]


async def approvals_page(request: web.Request) -> web.Response:
    decisions = await _application(request).pending_decisions()
    operators = request.app[SETTINGS].operator
    return render(request, "approvals.html", decisions=decisions, operators=operators, age=age)


async def find_decision(application: Application, code: str) -> PendingDecision | None:
    for decision in await application.pending_decisions():
        if decision.code == code:
            return decision
    return None


async def decide(request: web.Request) -> web.Response:
    code = request.match_info["code"]
    form = await request.post()
    choice, answer = form.get("choice"), form.get("answer")
    choice = choice if isinstance(choice, str) else ""
    answer = answer if isinstance(answer, str) else ""
    application = _application(request)
    decision = await find_decision(application, code)
    if decision is None:
        return render(
            request, "result.html", status=404, message=f"There is no pending decision {code}."
        )
    if not choice and not (decision.free_answer and answer.strip()):
        return render(request, "result.html", status=400, message="Choose one of the buttons.")
    operator = request.app[SETTINGS].operator.get(decision.channel)
    if not operator:
        return render(
            request,
            "result.html",
            status=403,
            message=f"No operator identity for {decision.channel}: set "
            f"dashboard.operator.{decision.channel} to an owner of that channel.",
        )
    try:
        line = await application.decide(decision, choice, decider_id=operator, answer=answer)
    except ValueError as exc:
        return render(request, "result.html", status=400, message=str(exc))
    if line is None:
        return render(
            request,
            "result.html",
            status=403,
            message=f"{operator} may not decide on {decision.channel}: it is not in "
            f"access.owners or access.admins there.",
        )
    return render(request, "result.html", message=line)
