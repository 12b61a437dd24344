"""A task's process run through the Podman REST service (``sandbox/podman/api_exec.py``),
in a real container: it behaves as the pipes of a ``podman exec -i`` CLI did (stdin in
pieces then end of file, stdout and stderr apart, the exit code, output that waits for its
reader instead of filling memory), a variable's value cannot smuggle in another variable,
and a killed task ends with everything it started. The exec session is let go of at once
(podman would keep it, and two conmons, for five minutes)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from gateway_bot.config.server import load_server_config
from gateway_bot.runtime.agent_setup import agent_image_files
from gateway_bot.sandbox.base import ExecutionContext, SandboxProcess, SandboxUnavailable
from gateway_bot.sandbox.child import STDERR_LIMIT, STDOUT_LINE_LIMIT
from gateway_bot.sandbox.podman.api_exec import PodmanApiExecProcess
from gateway_bot.sandbox.podman.sandbox import PodmanSandbox
from tests.integration.sandbox.test_sandbox_stdin import make_context
from tests.support.sandbox_fixtures import SandboxSetup, podman, wait_until

T = TypeVar("T")
DEADLINE_S = 180
"""A guard so a stuck stream fails the test instead of hanging it, not a speed check."""


def in_sandbox(
    sandbox: SandboxSetup,
    context_id: str,
    steps: Callable[[PodmanSandbox, ExecutionContext], Awaitable[T]],
) -> T:
    config = load_server_config(sandbox.config())
    podman_sandbox = PodmanSandbox(config.sandbox, config.state_dir, agent_image_files(config))
    context = make_context(sandbox.tmp_path / "contexts", context_id)

    async def go() -> T:
        try:
            async with asyncio.timeout(DEADLINE_S):
                return await steps(podman_sandbox, context)
        finally:
            await podman_sandbox.close()

    return asyncio.run(go())


async def start(
    podman_sandbox: PodmanSandbox, context: ExecutionContext, script: str, **kwargs: object
) -> PodmanApiExecProcess:
    process: SandboxProcess = await podman_sandbox.start(
        context,
        ["bash", "-c", script],
        {},
        **kwargs,  # type: ignore[arg-type]
    )
    assert isinstance(process, PodmanApiExecProcess), "a local service runs tasks itself"
    return process


def exec_ids(container: str) -> str:
    return podman("inspect", "--format", "{{.ExecIDs}}", container).stdout.strip()


def host_processes(program: bytes, argument: str) -> list[int]:
    """PIDs in the host's /proc running ``program`` with ``argument`` among its argv."""
    found = []
    for name in os.listdir("/proc"):
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(program) and argument.encode() in argv:
            found.append(int(name))
    return found


def session_conmons(exec_id: str) -> list[int]:
    return host_processes(b"conmon", exec_id)


def test_a_task_through_the_service_streams_as_a_pipe_would(sandbox: SandboxSetup) -> None:
    async def steps(podman_sandbox: PodmanSandbox, context: ExecutionContext) -> None:
        # stdin in pieces, each answered before the next; end of file ends the process;
        # stdout and stderr stay apart; the exit code comes through.
        script = (
            'while read -r line; do echo "out $line"; echo "err $line" >&2; done; '
            "echo 'input ended'; exit 7"
        )
        process = await start(podman_sandbox, context, script, keep_stdin=True)
        said = []
        for piece in (b"first", b" piece\n", b"second\n"):
            await process.write(piece)
            if piece.endswith(b"\n"):
                said.append((await process.stdout.readline()).decode().strip())
        process.close_stdin()
        said += (await process.stdout.read()).decode().splitlines()
        assert said == ["out first piece", "out second", "input ended"]
        assert await process.wait() == 7
        assert (await process.read_stderr()).splitlines() == ["err first piece", "err second"]
        with pytest.raises(ConnectionError):
            await process.write(b"too late\n")
        # The session is let go of now, not after podman's five minutes.
        container = f"gwb-{context.id}"
        await asyncio.to_thread(
            wait_until, lambda: exec_ids(container) == "[]", "the exec session's removal", 120
        )
        await asyncio.to_thread(
            wait_until, lambda: session_conmons(process.exec_id) == [], "its conmons' exit", 60
        )

        # A flood on stderr: the first STDERR_LIMIT bytes are kept, the rest read and
        # dropped (the process is not blocked by it and memory does not grow).
        flood = await start(podman_sandbox, context, "head -c 8000000 /dev/zero | tr '\\0' e >&2")
        assert await flood.stdout.read() == b""
        assert await flood.wait() == 0
        assert await flood.read_stderr() == "e" * STDERR_LIMIT

        # A flood on stdout nobody reads yet: reading the connection pauses (as a full
        # pipe would) at twice the line limit; then every byte arrives, in order.
        size = 2 * STDOUT_LINE_LIMIT + 8 * 1024 * 1024
        flood = await start(podman_sandbox, context, f"head -c {size} /dev/zero; echo; echo done")
        await asyncio.to_thread(
            wait_until, lambda: flood.waiting_for_reader, "the stream to wait for its reader", 120
        )
        received, tail = 0, b""
        while chunk := await flood.stdout.read(1024 * 1024):
            received += len(chunk)
            tail = (tail + chunk)[-6:]  # the stream's end, whichever reads it came in
        assert (received, tail) == (size + 6, b"\ndone\n")
        assert await flood.wait() == 0

    in_sandbox(sandbox, "api-streams", steps)


def test_a_value_with_line_breaks_cannot_add_a_variable(sandbox: SandboxSetup) -> None:
    """The attack: a repo's container_env value written to break a line of an env file (the
    CLI path's) and define a variable of its own. Through the service every value arrives
    byte for byte, and a name that is not one is refused."""
    values = {
        "GWB_INJECT": "harmless\nGWB_INJECTED=owned\nPATH=/tmp/evil",
        "GWB_EQUALS": "a=b==c=",
        "GWB_UNICODE": "héllo ✓ 日本 \t trailing ",
        "GWB_QUOTES": "\"quoted\" 'single' $HOME `id`",
    }

    async def steps(podman_sandbox: PodmanSandbox, context: ExecutionContext) -> None:
        process = await podman_sandbox.start(context, ["env", "-0"], values)
        listed = (await process.stdout.read()).decode()
        assert await process.wait() == 0
        env = dict(entry.split("=", 1) for entry in listed.split("\0") if entry)
        assert {name: env.get(name) for name in values} == values
        assert "GWB_INJECTED" not in env
        assert env["PATH"] != "/tmp/evil"
        with pytest.raises(SandboxUnavailable, match="not valid"):
            await podman_sandbox.start(context, ["true"], {"GWB_A=1 GWB_B": "2"})
        # The refused start left the conversation usable.
        process = await podman_sandbox.start(context, ["true"], {})
        assert await process.wait() == 0

    in_sandbox(sandbox, "api-env", steps)


def test_a_killed_task_ends_at_once_with_what_it_started(sandbox: SandboxSetup) -> None:
    token = "4242.4242"  # names the task's processes on the host's /proc

    def running_token() -> list[int]:
        return host_processes(b"sleep", token)

    async def steps(podman_sandbox: PodmanSandbox, context: ExecutionContext) -> int:
        script = f"trap '' TERM HUP; sleep {token} & setsid sleep {token} & echo started; wait"
        process = await start(podman_sandbox, context, script, keep_stdin=True)
        assert await process.stdout.readline() == b"started\n"
        await asyncio.to_thread(
            wait_until, lambda: len(running_token()) == 2, "both sleeps running", 60
        )
        process.kill()
        code = await process.wait()
        assert await process.stdout.read() == b""
        with pytest.raises(ConnectionError):
            await process.write(b"after the kill\n")
        return code

    code = in_sandbox(sandbox, "api-kill", steps)
    assert code != 0
    assert running_token() == [], "the task's processes ended with it"
    assert sandbox.containers()["api-kill"]["running"], "the container stays for the next task"
