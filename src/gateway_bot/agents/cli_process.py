"""One run of a headless agent CLI whose stream is JSON lines: the loop Gemini CLI and
Codex share (Claude Code's runner has its own, with its warm variant beside it).

The prompt goes in on stdin, each line goes to the event log and, parsed, to the core.
Neither CLI puts the reply in its final line: the reply is the assistant text after the
last tool call. Gemini CLI lingers seconds after its last line (node tearing down), so a
run whose final line has come is given a short grace and then ended: the session is
already on disk by then.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from gateway_bot.agents.base import (
    AgentEvent,
    AgentOutcome,
    AgentRequest,
    InitEvent,
    OnEvent,
    ResultEvent,
    TextEvent,
    ToolUseEvent,
)
from gateway_bot.agents.event_log import EventLog
from gateway_bot.sandbox.base import ExecutionContext, Sandbox, SandboxProcess

EXIT_GRACE_S = 2.0
"""How long a CLI may take to exit after its final line before it is ended."""


@dataclass(frozen=True)
class CliRun:
    argv: Sequence[str]
    env: Mapping[str, str]
    parse_line: Callable[[str], Sequence[AgentEvent]]
    unresumable: re.Pattern[str]
    """Failure text meaning the resumed session cannot be continued."""


async def run_cli(
    run: CliRun,
    request: AgentRequest,
    sandbox: Sandbox,
    context: ExecutionContext,
    event_log: EventLog,
    on_event: OnEvent,
) -> AgentOutcome:
    process = await sandbox.start(context, run.argv, run.env, stdin_data=request.prompt.encode())
    session_id: str | None = None
    result: ResultEvent | None = None
    reply: list[str] = []
    timed_out = False
    exit_code: int | None = None
    try:
        async with asyncio.timeout(request.timeout_s):
            async for raw_line in process.stdout:
                line = raw_line.decode("utf-8", "replace").strip()
                if not line:
                    continue
                await event_log.append(line)
                for event in run.parse_line(line):
                    if isinstance(event, InitEvent):
                        session_id = event.session_id or session_id
                    elif isinstance(event, ToolUseEvent):
                        reply.clear()
                    elif isinstance(event, TextEvent):
                        reply.append(event.text)
                    elif isinstance(event, ResultEvent):
                        if not event.is_error and not event.text:
                            event = replace(event, text="".join(reply))
                        event = replace(event, session_id=event.session_id or session_id)
                        result = event
                    await on_event(event)
                if result is not None:
                    break
            exit_code = await _exit_code(process, grace_s=EXIT_GRACE_S if result else None)
    except TimeoutError:
        timed_out = True
        exit_code = await _kill(process)
    except BaseException:
        await _kill(process)
        raise
    finally:
        await event_log.end_run()
    stderr = await process.read_stderr()
    failure_text = (result.text if result and result.is_error else "") + "\n" + stderr
    unresumable = bool(
        request.resume_session_id
        and not timed_out
        and (result is None or result.is_error)
        and run.unresumable.search(failure_text)
    )
    return AgentOutcome(
        result=result,
        session_id=session_id,
        exit_code=exit_code,
        stderr=stderr,
        timed_out=timed_out,
        unresumable=unresumable,
    )


async def _exit_code(process: SandboxProcess, grace_s: float | None) -> int | None:
    """The exit code; with a grace, a process still there after it is ended (and its
    lingering is no failure: the run said it was done)."""
    if grace_s is None:
        return await process.wait()
    try:
        return await asyncio.wait_for(process.wait(), timeout=grace_s)
    except TimeoutError:
        await _kill(process)
        return 0


async def _kill(process: SandboxProcess) -> int | None:
    process.kill()
    with contextlib.suppress(Exception):
        return await asyncio.wait_for(process.wait(), timeout=10)
    return None
