"""The egress proxy is taken for serving a context's network without asking podman while
its process runs on the networks seen (``EgressProxy.ensure``). Written as the attack on
that shortcut: a conversation collected as garbage (its network taken off the proxy and
removed) while another context's task has the proxy looked up, and then resumed, still
reaches the proxy from its new network; otherwise its agent is cut off for as long as the
proxy runs."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway_bot.sandbox.podman.proxy import PROXY_PORT
from tests.integration.sandbox.test_sandbox_stdin import make_context
from tests.integration.state.test_sandbox_known_state import _run, _sandbox, _within_deadline
from tests.support.sandbox_fixtures import SandboxSetup

REACH_PROXY = (
    f"if timeout 5 bash -c 'exec 3<>/dev/tcp/proxy/{PROXY_PORT}' 2>/dev/null; "
    "then echo reached; else echo cut-off; fi"
)


def test_a_collected_network_taken_off_the_proxy_during_a_lookup_is_served_again(
    sandbox: SandboxSetup,
) -> None:
    collected = make_context(sandbox.tmp_path / "contexts", "proxy-collected")
    other = make_context(sandbox.tmp_path / "contexts", "proxy-other")
    podman_sandbox = _sandbox(sandbox)
    proxy = podman_sandbox.proxy

    async def steps() -> None:
        try:
            assert await _run(podman_sandbox, collected, REACH_PROXY) == "reached\n"
            # The garbage collection's disconnect lands while the other context's task has
            # looked the proxy up (its inspect still lists the collected network) and not
            # yet remembered what it saw: the order of a real race, made certain here.
            looked_up, disconnecting = asyncio.Event(), asyncio.Event()
            inspect, disconnect = proxy._inspect, proxy.disconnect

            async def inspect_then_let_the_collection_in() -> Any:
                info = await inspect()
                looked_up.set()
                if not disconnecting.is_set():
                    await asyncio.wait_for(disconnecting.wait(), 60)
                return info

            async def disconnect_noted(network: str) -> None:
                disconnecting.set()
                await disconnect(network)

            proxy._inspect = inspect_then_let_the_collection_in  # type: ignore[method-assign]
            proxy.disconnect = disconnect_noted  # type: ignore[method-assign]
            other_task = asyncio.create_task(_run(podman_sandbox, other, "echo other"))
            await asyncio.wait_for(looked_up.wait(), 60)  # the other task's proxy inspect
            await podman_sandbox.discard(collected.id)
            assert await other_task == "other\n"
            proxy._inspect, proxy.disconnect = inspect, disconnect  # type: ignore[method-assign]
            # The conversation resumes: a new network, on which the proxy must be.
            assert await _run(podman_sandbox, collected, REACH_PROXY) == "reached\n"
        finally:
            await podman_sandbox.close()

    _within_deadline(steps)
