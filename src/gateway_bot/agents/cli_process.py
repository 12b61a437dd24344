"""One run of a headless agent CLI whose stream is JSON lines: the loop every backend shares
(Claude Code's cold runs, Gemini CLI, Codex), and the turn reading its warm runner shares too.

Each line goes to the event log, then either answers the CLI (a line asking the daemon,
such as Claude Code's permission requests, gets its reply on stdin) or is parsed into typed
events for the core. A result without reply text (Gemini CLI and Codex never put it in the
final line) gets the assistant text after the last tool call. A result saying the model API
refused the credentials ends the CLI at once: it would retry the same key for minutes.

The prompt is the whole of stdin, or (for a CLI that reads turns as lines and may be asked
for answers) one line on a stdin kept open, closed once the result is in. After the result,
what the CLI still writes goes to the log while it exits; a CLI given an exit grace
(Gemini CLI lingers seconds, node tearing down) is ended after it: the session is already on
disk by then.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from gateway_bot.agents.base import (
    CREDENTIALS_REFUSED,
    NOTHING_BEFORE,
    AgentEvent,
    AgentOutcome,
    AgentRequest,
    InitEvent,
    OnEvent,
    ResultEvent,
    RunningTotals,
    TextEvent,
    ToolUseEvent,
)
from gateway_bot.agents.event_log import EventLog
from gateway_bot.sandbox.base import ExecutionContext, Sandbox, SandboxProcess

EXIT_GRACE_S = 2.0
"""How long a lingering CLI may take to exit after its final line before it is ended."""

ParseLine = Callable[[str], Sequence[AgentEvent]]
AnswerLine = Callable[[str], Awaitable[bytes | None]]
"""The reply to write to stdin for a line that asks the daemon; None for any other line."""
TurnLine = Callable[[str, ResultEvent], str]
"""The CLI's result line as the log keeps it once the result's figures are the turn's own."""


@dataclass(frozen=True)
class CliStream:
    """How to read one CLI's output (and answer it)."""

    parse_line: ParseLine
    answer_line: AnswerLine | None = None
    turn_line: TurnLine | None = None
    """None: the log keeps the result line as the CLI wrote it, running totals and all."""


@dataclass(frozen=True)
class CliRun:
    argv: Sequence[str]
    env: Mapping[str, str]
    stream: CliStream
    unresumable: re.Pattern[str]
    """Failure text meaning the resumed session cannot be continued."""
    prompt_line: Callable[[str], bytes] | None = None
    """The prompt as one stdin line, stdin kept open until the result; None: the prompt is
    the whole of stdin."""
    before: RunningTotals = NOTHING_BEFORE
    """What the CLI's result figures count besides this run (``base.RunningTotals``)."""
    exit_grace_s: float | None = EXIT_GRACE_S
    """None: the CLI exits by itself once its result is out, waited for without a limit
    (the task's own time limit still holds)."""


class CliRunner:
    """An ``AgentRunner`` for one CLI: each backend's runner says how a request's process
    runs (``prepare``: its argv, environment and stream); the run itself is ``run_cli``."""

    def __init__(self, command: Sequence[str]) -> None:
        self._command = list(command)

    async def prepare(
        self,
        request: AgentRequest,
        sandbox: Sandbox,
        context: ExecutionContext,
        event_log: EventLog,
    ) -> CliRun:
        raise NotImplementedError

    async def run(
        self,
        request: AgentRequest,
        sandbox: Sandbox,
        context: ExecutionContext,
        event_log: EventLog,
        on_event: OnEvent,
    ) -> AgentOutcome:
        run = await self.prepare(request, sandbox, context, event_log)
        return await run_cli(run, request, sandbox, context, event_log, on_event)


@dataclass
class Turn:
    """What one turn's stream said so far: kept by the caller, so a turn cut short by its
    time limit still tells which session it was in."""

    session_id: str | None = None
    before: RunningTotals = NOTHING_BEFORE
    """Subtracted from the result's figures (``base.RunningTotals``)."""
    result: ResultEvent | None = None
    """The result with the turn's own figures."""
    reported: ResultEvent | None = None
    """The result as the CLI reported it."""
    lines: int = 0


async def run_cli(
    run: CliRun,
    request: AgentRequest,
    sandbox: Sandbox,
    context: ExecutionContext,
    event_log: EventLog,
    on_event: OnEvent,
) -> AgentOutcome:
    """One process for one task: started, read to its result, ended."""
    keep_stdin = run.prompt_line is not None
    stdin_data = b"" if keep_stdin else request.prompt.encode()
    process = await sandbox.start(
        context, run.argv, run.env, stdin_data=stdin_data, keep_stdin=keep_stdin
    )
    await event_log.note_ready()
    turn = Turn(before=run.before)
    timed_out = False
    exit_code: int | None = None
    try:
        async with asyncio.timeout(request.timeout_s):
            if run.prompt_line is not None:
                await process.write(run.prompt_line(request.prompt))
            await read_turn(process, turn, run.stream, event_log, on_event)
            if turn.result is None:
                exit_code = await process.wait()
            else:
                process.close_stdin()  # one turn: a CLI reading turns from stdin then exits
                exit_code = await _exit_after_result(process, event_log, run.exit_grace_s)
    except TimeoutError:
        timed_out = True
        exit_code = await kill(process)
    except BaseException:
        await kill(process)
        raise
    finally:
        await event_log.end_run()
    stderr = await process.read_stderr()
    return AgentOutcome(
        result=turn.result,
        session_id=turn.session_id,
        exit_code=exit_code,
        stderr=stderr,
        timed_out=timed_out,
        unresumable=unresumable(run.unresumable, request, turn.result, stderr, timed_out=timed_out),
    )


async def read_turn(
    process: SandboxProcess,
    turn: Turn,
    stream: CliStream,
    event_log: EventLog,
    on_event: OnEvent,
) -> None:
    """Read the process's lines until the turn's result (or the end of its output)."""
    reply: list[str] = []
    while turn.result is None:
        raw_line = await process.stdout.readline()
        if not raw_line:
            return
        line = raw_line.decode("utf-8", "replace").strip()
        if not line:
            continue
        turn.lines += 1
        answer = await stream.answer_line(line) if stream.answer_line is not None else None
        if answer is not None:
            await event_log.append(line)
            await process.write(answer)
            continue
        events = list(stream.parse_line(line))
        for index, event in enumerate(events):
            if isinstance(event, InitEvent):
                turn.session_id = event.session_id or turn.session_id
            elif isinstance(event, ToolUseEvent):
                reply.clear()
            elif isinstance(event, TextEvent):
                reply.append(event.text)
            elif isinstance(event, ResultEvent):
                turn.reported = _completed(event, "".join(reply), turn.session_id)
                turn.result = turn.reported.since(turn.before)
                turn.session_id = turn.result.session_id
                events[index] = turn.result
                if stream.turn_line is not None and turn.result != turn.reported:
                    line = stream.turn_line(line, turn.result)
        await event_log.append(line)
        for event in events:
            if isinstance(event, ResultEvent) and event.subtype == CREDENTIALS_REFUSED:
                process.kill()  # it would retry the refused key (and may go on working)
            await on_event(event)


def _completed(result: ResultEvent, reply: str, session_id: str | None) -> ResultEvent:
    """The result with the reply and the session its stream named, where it has neither."""
    text = result.text or ("" if result.is_error else reply)
    return replace(result, text=text, session_id=result.session_id or session_id)


async def _exit_after_result(
    process: SandboxProcess, event_log: EventLog, grace_s: float | None
) -> int | None:
    """The exit code once what the CLI still writes is logged; with a grace, a process
    still there after it is ended (its lingering is no failure: the run said it was done)."""

    async def drain_and_wait() -> int:
        async for raw_line in process.stdout:
            if line := raw_line.decode("utf-8", "replace").strip():
                await event_log.append(line)
        return await process.wait()

    if grace_s is None:
        return await drain_and_wait()
    try:
        return await asyncio.wait_for(drain_and_wait(), timeout=grace_s)
    except TimeoutError:
        await kill(process)
        return 0


def unresumable(
    pattern: re.Pattern[str],
    request: AgentRequest,
    result: ResultEvent | None,
    stderr: str,
    *,
    timed_out: bool,
) -> bool:
    """Did a run that resumed a session fail because that session cannot be continued?"""
    failure_text = (result.text if result and result.is_error else "") + "\n" + stderr
    return bool(
        request.resume_session_id
        and not timed_out
        and (result is None or result.is_error)
        and pattern.search(failure_text)
    )


async def kill(process: SandboxProcess) -> int | None:
    process.kill()
    with contextlib.suppress(Exception):
        return await asyncio.wait_for(process.wait(), timeout=10)
    return None
