"""Warm Claude Code sessions: one long-lived ``claude -p`` per active conversation.

A cold run pays the CLI's start-up and session reload (~0.8 s) on every turn; a chat is a run
of short turns. So the process is started once with ``--input-format stream-json`` and each
later message is written to its stdin as one JSON user message; the turn's events are read
until its ``result``. The conversation's lane already runs one task at a time, so a turn
never meets another turn in the same process.

That result's ``total_cost_usd`` is the process's whole life's (its usage and turns are the
turn's): the turn's cost is what it adds to the last one's, which is what the task records,
the reply shows, the budget counts and the log keeps (``stream.with_turn_cost``).

After each turn everything the agent left running in the background is ended, the process
itself excepted (``SandboxProcess.end_others``): a warm session keeps no more than a cold
run does.

Anything unusual sends the turn to the cold runner (``claude -p --resume``), which is what
every turn used before: the process died, was killed (``/stop``, a kill from the host, the
container removed), or wrote nothing for the turn. The session files live in the
conversation's home either way, so history is intact. A process that dies half-way through
a turn is reported like a cold run that died: re-running it could repeat its tool calls.

Hand-written rather than claude-agent-sdk: the protocol used is one line in (the user
message) and the same stream-json lines out that the cold runner already parses into the
project's typed events; the SDK would add a control protocol, a second parser and a wrapper
script around ``podman exec`` for no behaviour the gateway uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway_bot.agents.base import (
    NOTHING_BEFORE,
    AgentOutcome,
    AgentRequest,
    OnEvent,
    RunningTotals,
    WarmSettings,
)
from gateway_bot.agents.claude.control import user_message_line
from gateway_bot.agents.claude.runner import (
    UNRESUMABLE,
    ClaudeCodeRunner,
    agent_env,
    claude_stream,
)
from gateway_bot.agents.cli_process import Turn, read_turn, unresumable
from gateway_bot.agents.event_log import EventLog
from gateway_bot.sandbox.base import ExecutionContext, Sandbox, SandboxProcess

log = logging.getLogger(__name__)

END_GRACE_S = 5.0
"""How long an ended session may take to exit after its stdin closes before it is killed."""


@dataclass
class WarmSession:
    process: SandboxProcess
    fingerprint: tuple[object, ...]
    """What the process was started with (command, model, environment): a turn asking for
    anything else gets a new process."""
    session_id: str | None
    exited: asyncio.Task[int]
    last_used: float = field(default_factory=time.monotonic)
    cost_so_far: RunningTotals = NOTHING_BEFORE
    """The process's cost over its life as its last result said: the CLI reports that
    total in every turn's result, and the turn's cost is what it adds (its tokens and
    turns the CLI reports per turn already)."""

    @property
    def alive(self) -> bool:
        return not self.exited.done()


class _NoTurn(Exception):
    """The process took or answered nothing of this turn: the turn may run cold instead."""


class WarmClaudeRunner:
    """An AgentRunner that keeps each context's ``claude`` process between turns, at most
    ``settings.max_sessions`` of them (the least recently used is ended first), each ended
    after ``settings.idle_s`` unused (or by the sandbox's idle stop: ``end``) and all at
    ``close``."""

    def __init__(self, command: Sequence[str], settings: WarmSettings) -> None:
        self._cold = ClaudeCodeRunner(command)
        self._settings = settings
        self._idle: OrderedDict[str, WarmSession] = OrderedDict()
        """Sessions between turns, least recently used first."""
        self._in_turn: dict[str, WarmSession] = {}
        self._starting = 0
        self._housekeeping: asyncio.Task[None] | None = None
        self.processes_started = 0
        """How many warm processes this runner started (the benchmark and tests read it)."""

    def build_argv(self, request: AgentRequest) -> list[str]:
        argv = self._cold.build_argv(request)
        if "--input-format" in argv:  # with approvals the cold argv has it already
            return argv
        return [*argv, "--input-format", "stream-json"]

    @property
    def live_sessions(self) -> int:
        return len(self._idle) + len(self._in_turn) + self._starting

    async def run(
        self,
        request: AgentRequest,
        sandbox: Sandbox,
        context: ExecutionContext,
        event_log: EventLog,
        on_event: OnEvent,
    ) -> AgentOutcome:
        self._start_housekeeping()
        session = await self._session_for(request, sandbox, context)
        if session is None:
            return await self._cold.run(request, sandbox, context, event_log, on_event)
        self._in_turn[context.id] = session
        keep = False
        try:
            outcome = await self._turn(session, request, event_log, on_event)
            keep = outcome.succeeded and session.alive and await _end_background(session)
            return outcome
        except _NoTurn:
            pass
        finally:
            del self._in_turn[context.id]
            if keep:
                session.last_used = time.monotonic()
                self._idle[context.id] = session
            else:
                # Ended before anything else starts in the context: a sandbox clears the
                # context's other processes when one ends.
                await _end(session)
        log.info("conversation %s: the warm agent took no turn; running it cold", context.id)
        return await self._cold.run(request, sandbox, context, event_log, on_event)

    async def _session_for(
        self, request: AgentRequest, sandbox: Sandbox, context: ExecutionContext
    ) -> WarmSession | None:
        """The context's live session if it fits the request, else a new one; None when the
        cap is taken by turns in progress (this turn then runs cold)."""
        fingerprint = self._fingerprint(request, context)
        session = self._idle.pop(context.id, None)
        if session is not None:
            fits = session.fingerprint == fingerprint and (
                session.session_id == request.resume_session_id
            )
            if session.alive and fits:
                return session
            await _end(session)
        while self._idle and self.live_sessions >= self._settings.max_sessions:
            evicted, oldest = self._idle.popitem(last=False)
            log.info("ending the warm agent of %s (least recently used)", evicted)
            await _end(oldest)
        if self.live_sessions >= self._settings.max_sessions:
            return None
        self._starting += 1  # counted against the cap while other turns start theirs
        try:
            argv, env = self.build_argv(request), agent_env(sandbox, context, request)
            process = await sandbox.start(context, argv, env, keep_stdin=True)
        finally:
            self._starting -= 1
        self.processes_started += 1
        return WarmSession(
            process=process,
            fingerprint=fingerprint,
            session_id=request.resume_session_id,
            exited=asyncio.ensure_future(process.wait()),
        )

    def _fingerprint(self, request: AgentRequest, context: ExecutionContext) -> tuple[object, ...]:
        no_session = AgentRequest("", None, request.model, 0, request.env, request.permissions)
        return (
            tuple(self.build_argv(no_session)),
            tuple(sorted(request.env.items())),
            tuple(sorted(context.env.items())),
            context.credentials,
            context.allowlist,
            context.containerfile,  # a new image: the sandbox recreates the container
        )

    async def _turn(
        self,
        session: WarmSession,
        request: AgentRequest,
        event_log: EventLog,
        on_event: OnEvent,
    ) -> AgentOutcome:
        process = session.process
        turn = Turn(session_id=session.session_id, before=session.cost_so_far)
        # Permission requests are answered with this turn's task's decisions (a warm
        # process outlives its tasks; each turn brings its own).
        stream = claude_stream(request.permissions)
        try:
            if not session.alive:
                raise _NoTurn
            try:
                await process.write(user_message_line(request.prompt))
            except ConnectionError:
                raise _NoTurn from None
            await event_log.note_ready()
            async with asyncio.timeout(request.timeout_s):
                await read_turn(process, turn, stream, event_log, on_event)
        except TimeoutError:
            process.kill()
            return AgentOutcome(None, turn.session_id, None, "", timed_out=True)
        except BaseException:
            process.kill()  # /stop (cancellation) or a failure: this process is done
            raise
        finally:
            session.session_id = turn.session_id
            if turn.reported is not None:
                session.cost_so_far = RunningTotals(cost_usd=turn.reported.cost_usd)
            await event_log.end_run()
        if turn.result is not None:
            # A session the API refuses fails inside the turn, as in a cold run's result.
            bad_session = unresumable(UNRESUMABLE, request, turn.result, "", timed_out=False)
            return AgentOutcome(turn.result, turn.session_id, 0, "", unresumable=bad_session)
        if turn.lines == 0:
            raise _NoTurn
        # Died half-way through the turn: reported as a cold run that died would be.
        exit_code = await session.exited
        stderr = await process.read_stderr()
        return AgentOutcome(
            None,
            turn.session_id,
            exit_code,
            stderr,
            unresumable=unresumable(UNRESUMABLE, request, None, stderr, timed_out=False),
        )

    # -- ending sessions ------------------------------------------------------------------

    def idle_since(self) -> dict[str, float]:
        """Context id -> last use of its session between turns (for the sandbox's idle stop
        and cap, which end a session with its container)."""
        return {context_id: s.last_used for context_id, s in self._idle.items()}

    async def end(self, context_id: str) -> None:
        if (session := self._idle.pop(context_id, None)) is not None:
            log.info("ending the warm agent of %s with its container", context_id)
            await _end(session)

    async def end_idle(self) -> None:
        """End the sessions unused for ``settings.idle_s``: an idle conversation's container
        can then stop (the sandbox keeps a container with a live process running)."""
        now, idle_s = time.monotonic(), self._settings.idle_s
        for context_id, session in list(self._idle.items()):
            if not session.alive or (idle_s is not None and now - session.last_used > idle_s):
                del self._idle[context_id]
                await _end(session)

    def _start_housekeeping(self) -> None:
        if self._housekeeping is None:
            self._housekeeping = asyncio.create_task(self._housekeep())

    async def _housekeep(self) -> None:
        idle_s = self._settings.idle_s
        interval = max(0.5, min(60.0, (idle_s or 240) / 4))  # the dead are ended too
        while True:
            await asyncio.sleep(interval)
            await self.end_idle()

    async def close(self) -> None:
        """Daemon shutdown: every session between turns ends (a turn still running is the
        scheduler's to cancel, which ends its process)."""
        if self._housekeeping is not None:
            self._housekeeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._housekeeping
            self._housekeeping = None
        sessions = list(self._idle.values())
        self._idle.clear()
        await asyncio.gather(*(_end(s) for s in sessions), return_exceptions=True)


async def _end_background(session: WarmSession) -> bool:
    """After a turn, whatever the agent started and left running ends (as it would with a
    cold run's process), before the reply goes out. False when that could not be done: the
    session is then ended, which ends the rest with it."""
    try:
        await session.process.end_others()
    except Exception:
        log.exception("could not end what the agent left running; ending its session")
        return False
    return session.alive


async def _end(session: WarmSession) -> None:
    """Close stdin (the CLI finishes its session file and exits), kill after a grace."""
    session.process.close_stdin()
    try:
        await asyncio.wait_for(asyncio.shield(session.exited), END_GRACE_S)
    except TimeoutError:
        session.process.kill()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(session.exited), END_GRACE_S * 2)
    except Exception:  # the process's own failure: it has ended either way
        session.process.kill()
    if session.exited.done() and not session.exited.cancelled():
        session.exited.exception()  # retrieved: an exec that failed is not an unhandled error
