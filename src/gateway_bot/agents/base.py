"""The agent runner protocol and the typed events every backend's stream becomes.

The core reacts to these events (progress, usage, session ids) without knowing which CLI
produced them, so Gemini CLI or Codex can be added as another runner.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway_bot.agents.event_log import EventLog
from gateway_bot.sandbox.base import ExecutionContext, Sandbox


@dataclass(frozen=True)
class InitEvent:
    session_id: str
    model: str


@dataclass(frozen=True)
class ToolUseEvent:
    tool: str
    summary: str
    """One line a human can read: the command, the file, the pattern."""
    timeout_s: float | None = None
    """The call's own declared time limit (Claude Code's Bash ``timeout``), if any: the run
    may be silent that much longer while it runs (``stall_watch.py``)."""


@dataclass(frozen=True)
class ToolResultEvent:
    is_error: bool
    summary: str


@dataclass(frozen=True)
class TextEvent:
    text: str


@dataclass(frozen=True)
class ResultEvent:
    is_error: bool
    subtype: str
    text: str
    session_id: str | None
    cost_usd: float
    num_turns: int
    duration_s: float
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class NoticeEvent:
    """What the CLI says about its own run, not the agent's work (the model API failing and
    being retried): shown as a progress step, so a long wait is not a silent one."""

    text: str


AgentEvent = InitEvent | ToolUseEvent | ToolResultEvent | TextEvent | ResultEvent | NoticeEvent
OnEvent = Callable[[AgentEvent], Awaitable[None]]


@dataclass(frozen=True)
class PermissionAnswer:
    allow: bool
    message: str = ""
    """For a deny: what the model reads as the tool's error."""
    updated_input: Mapping[str, Any] | None = None
    """For an allow: the tool's input (AskUserQuestion's carries the answers)."""


class ToolPermissions(Protocol):
    """Decides the agent's tool calls for one task (the core's ``tool_permissions.py``); a backend
    that cannot ask ignores it (``gateway-bot check`` says so)."""

    async def decide(self, tool_name: str, tool_input: Mapping[str, Any]) -> PermissionAnswer: ...


@dataclass(frozen=True)
class AgentRequest:
    prompt: str
    resume_session_id: str | None
    model: str | None
    timeout_s: float
    env: dict[str, str] = field(default_factory=dict)
    permissions: ToolPermissions | None = None
    """Action approvals (decision 0087): who decides the agent's tool calls; None: the agent
    runs without asking (``--dangerously-skip-permissions``)."""


@dataclass(frozen=True)
class AgentOutcome:
    result: ResultEvent | None
    session_id: str | None
    exit_code: int | None
    stderr: str
    timed_out: bool = False
    unresumable: bool = False
    """The stored session cannot be continued (too long, gone, rejected by the API)."""

    @property
    def succeeded(self) -> bool:
        return not self.timed_out and self.result is not None and not self.result.is_error

    def error_text(self) -> str:
        if self.timed_out:
            return "the agent ran past its time limit and was stopped"
        if self.result is not None and self.result.is_error:
            return self.result.text or self.result.subtype
        detail = self.stderr.strip().splitlines()[-1:] or [f"exit code {self.exit_code}"]
        return f"the agent failed: {detail[0]}"


class AgentRunner(Protocol):
    async def run(
        self,
        request: AgentRequest,
        sandbox: Sandbox,
        context: ExecutionContext,
        event_log: EventLog,
        on_event: OnEvent,
    ) -> AgentOutcome: ...


@dataclass(frozen=True)
class WarmSettings:
    max_sessions: int
    """Most agent processes kept between turns at once (least recently used ended first)."""
    idle_s: float | None
    """A process unused this long is ended; None when the sandbox ends it with its
    container's idle stop (``idle_since`` and ``end``)."""


class WarmRunner(AgentRunner, Protocol):
    """A runner that keeps agent processes between turns; ``close`` ends them all."""

    def idle_since(self) -> Mapping[str, float]:
        """Context id -> when (``time.monotonic``) its process was last used, for each
        process between turns."""
        ...

    async def end(self, context_id: str) -> None:
        """End the context's process between turns (it has exited when this returns)."""
        ...

    async def close(self) -> None: ...
