"""The egress proxy's held requests as action approvals (decision 0086, layer 2's card).

The sandbox holds a request an egress ``ask`` rule matches and asks one callable (its
``EgressAsk``, ``sandbox/egress/held.py``) with a ``HeldRequest``; ``network_asker`` is that
callable: the request becomes a card in the conversation whose sandbox sent it (the
execution context's id is the conversation's id), through the same ``ActionApprovals.ask``
as the agent's tool calls, so Allow once / Always in this conversation / Deny, who may
decide, the timeout and the timeline are the same. Always remembers the method, host and
path (without the query): the same push to the same repository.

Typed against a protocol of the fields it reads, so the core does not depend on the proxy's
module; the daemon wires it with ``sandbox.set_egress_ask(network_asker(approvals))``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from gateway_bot.core.actions.approvals import ActionApprovals, ActionRequest


class HeldNetworkRequest(Protocol):
    @property
    def context_id(self) -> str: ...

    @property
    def method(self) -> str: ...

    @property
    def host(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def rule(self) -> str: ...

    def describe(self) -> str: ...


def network_signature(method: str, host: str, path: str) -> str:
    return f"network {method.upper()} {host.lower()} {path.split('?', 1)[0]}"


def network_asker(
    approvals: ActionApprovals,
) -> Callable[[HeldNetworkRequest], Awaitable[tuple[bool, str]]]:
    async def ask(held: HeldNetworkRequest) -> tuple[bool, str]:
        details = held.describe()
        decision = await approvals.ask(
            ActionRequest(
                conversation_id=held.context_id,
                task_id=None,
                kind="network",
                summary=details.splitlines()[0] if details else f"{held.method} {held.host}",
                details=details,
                rule=held.rule,
                signature=network_signature(held.method, held.host, held.path),
            )
        )
        return decision.allowed, decision.reason

    return ask
