"""``gateway-bot`` with every coroutine method on its intake path timed, for finding where an
acknowledgement's time goes (``python -m bench --trace``), not for the measured numbers.

    python -m bench.traced_daemon TRACE_FILE run --config CONFIG

Wraps the async methods of the Matrix and Slack channels' API, listener, adapter and state
store, the core's service (its intake and recovery), scheduler and SQLite store; each call
appends one JSON line (name, start, end on the monotonic clock, the asyncio task's name) to
TRACE_FILE. No product code changes: the classes are patched before the CLI starts.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import json
import sys
import time
from collections.abc import Callable
from typing import IO, Any

TRACED = {
    "gateway_bot.channels.matrix.api": ["MatrixApi"],
    "gateway_bot.channels.matrix.listener": ["MatrixListener"],
    "gateway_bot.channels.matrix.adapter": ["MatrixAdapter"],
    "gateway_bot.channels.matrix.inbound": ["InboundParser"],
    "gateway_bot.channels.matrix.session": ["MatrixSession"],
    "gateway_bot.channels.matrix.crypto": ["E2ee"],
    "gateway_bot.channels.matrix.store": ["MatrixStateStore"],
    "gateway_bot.channels.matrix.encrypted_intake": ["EncryptedIntake"],
    "gateway_bot.core.service": ["GatewayService"],
    "gateway_bot.core.intake.intake": ["Intake"],
    "gateway_bot.core.intake.recovery": ["Recovery"],
    "gateway_bot.core.conversations.queue": ["Scheduler"],
    "gateway_bot.core.conversations.queue_notices": ["QueueNotices"],
    "gateway_bot.core.conversations.host_waits": ["HostWaits"],
    "gateway_bot.core.intake.routing": ["Router"],
    "gateway_bot.core.admission.gate": ["Gatekeeper"],
    "gateway_bot.core.commands.mail": ["ConversationMailer"],
    "gateway_bot.state.database": ["Database"],
    "gateway_bot.state.context_lines": ["SqlContextLines"],
    "slack_sdk.web.async_client": ["AsyncWebClient"],
    "gateway_bot.state.sql_store": ["SqlStore"],
    "gateway_bot.state.conversations_store": ["SqlConversations"],
    "gateway_bot.state.task_views": ["SqlTaskViews"],
    "nio.client.async_client": ["AsyncClient"],
}
SLACK = [
    "gateway_bot.channels.slack.adapter",
    "gateway_bot.channels.slack.posts",
    "gateway_bot.channels.slack.socket_mode",
    "gateway_bot.channels.slack.listener",
    "gateway_bot.channels.slack.webapi",
    "gateway_bot.channels.slack.records",
]
SANDBOX = {
    "gateway_bot.sandbox.podman.sandbox": ["PodmanSandbox"],
    "gateway_bot.sandbox.podman.service": ["PodmanService"],
    "gateway_bot.sandbox.podman.service_process": ["ServiceProcess"],
    "gateway_bot.sandbox.podman.container_calls": ["ContainerCalls"],
    "gateway_bot.sandbox.podman.proxy": ["EgressProxy"],
    "gateway_bot.sandbox.podman.egress_wiring": ["EgressWiring"],
    "gateway_bot.sandbox.podman.images": ["ImageBuilder"],
    "gateway_bot.sandbox.podman.api_exec": ["PodmanApiExecProcess"],
    "gateway_bot.core.conversations.executor": ["TaskExecutor"],
}
"""The restart benchmark's per-task podman work (``--only restart --trace``)."""
SANDBOX_FUNCTIONS = {
    # module: functions, each patched in its own module and in the modules that imported it
    "gateway_bot.sandbox.podman.container_lifecycle": ["ensure_container", "after_exit"],
    "gateway_bot.sandbox.podman.api_exec": ["start_api_exec"],
}
_IMPORTERS = ["gateway_bot.sandbox.podman.sandbox"]


def _wrap(name: str, method: Callable[..., Any], out: IO[str]) -> Callable[..., Any]:
    @functools.wraps(method)
    async def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        try:
            return await method(*args, **kwargs)
        finally:
            task = asyncio.current_task()
            line = {"call": name, "start": start, "end": time.monotonic(),
                    "task": task.get_name() if task else ""}  # fmt: skip
            out.write(json.dumps(line) + "\n")

    return timed


def _wrap_sync(name: str, function: Callable[..., Any], out: IO[str]) -> Callable[..., Any]:
    """A blocking function run on a thread (``asyncio.to_thread``): its span, thread named."""

    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        try:
            return function(*args, **kwargs)
        finally:
            line = {"call": name, "start": start, "end": time.monotonic(), "task": "thread"}
            out.write(json.dumps(line) + "\n")

    return timed


def _patch_class(cls: type, out: IO[str]) -> None:
    for attribute, value in list(vars(cls).items()):
        if inspect.iscoroutinefunction(value) and not attribute.startswith("__"):
            setattr(cls, attribute, _wrap(f"{cls.__name__}.{attribute}", value, out))


def patch(out: IO[str]) -> None:
    for module_name, classes in TRACED.items():
        module = importlib.import_module(module_name)
        for class_name in classes:
            _patch_class(getattr(module, class_name), out)
    for module_name in SLACK:
        module = importlib.import_module(module_name)
        for value in list(vars(module).values()):
            if inspect.isclass(value) and value.__module__ == module_name:
                _patch_class(value, out)
    for module_name, classes in SANDBOX.items():
        module = importlib.import_module(module_name)
        for class_name in classes:
            _patch_class(getattr(module, class_name), out)
    importers = [importlib.import_module(m) for m in _IMPORTERS]
    for module_name, functions in SANDBOX_FUNCTIONS.items():
        module = importlib.import_module(module_name)
        for function_name in functions:
            timed = _wrap(f"{module_name.rsplit('.', 1)[1]}.{function_name}",
                          getattr(module, function_name), out)  # fmt: skip
            for holder in [module, *importers]:
                if getattr(holder, function_name, None) is getattr(module, function_name):
                    setattr(holder, function_name, timed)
    release = importlib.import_module("gateway_bot.sandbox.podman.exec_release")
    sweep = importlib.import_module("gateway_bot.sandbox.podman.strays")
    for holder, name in ((release, "release_exec_sessions"), (sweep, "kill_all_but_init")):
        setattr(holder, name, _wrap_sync(name, getattr(holder, name), out))
    api_exec = importlib.import_module("gateway_bot.sandbox.podman.api_exec")
    api_exec.release_exec_sessions = release.release_exec_sessions  # type: ignore[attr-defined]


def main() -> None:
    trace_path, *argv = sys.argv[1:]
    out = open(trace_path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
    patch(out)
    from gateway_bot.cli import main as cli_main

    sys.exit(cli_main(argv))


if __name__ == "__main__":
    main()
