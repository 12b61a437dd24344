"""The agent's settings (the ``agent:`` section of the server config).

Which agent CLIs run (``agents/registry.py`` names them), each one's command and model, how
long a run may take or stay silent, the warm processes kept between turns, and the
per-conversation budget and action approvals: everything about the agent, apart from the
daemon-wide sections in ``server.py``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveFloat

from gateway_bot.config.action_rules import ActionApprovalSettings
from gateway_bot.config.section import Section

BackendName = Literal["claude-code", "claude_code", "gemini-cli", "codex"]
"""The agent CLIs of ``agents/registry.py`` (claude_code: the older spelling)."""


class BackendSettings(Section):
    """One agent CLI's own settings (``agent.backends.NAME``)."""

    command: list[str] | None = Field(
        default=None, min_length=1, description="Its argv; unset: the backend's own."
    )
    model: str | None = Field(
        default=None, description="Its model when nothing else names one (/model, repo)."
    )


class AgentSettings(Section):
    backend: BackendName = Field(
        default="claude-code",
        description="The agent CLI (agents/registry.py); claude_code is the older spelling.",
    )
    enabled: list[BackendName] = Field(
        default_factory=list,
        description="Further agent CLIs a repo (.gateway/config.yaml agent:) or a "
        "conversation (/agent NAME) may choose; `backend` is always enabled.",
    )
    backends: dict[BackendName, BackendSettings] = Field(
        default_factory=dict,
        description="Per agent CLI: its command and default model (agent.command and "
        "agent.model are the default backend's).",
    )
    command: list[str] | None = Field(
        default=None, min_length=1, description="The agent's argv; unset: the backend's own."
    )
    model: str | None = None
    timeout_seconds: PositiveFloat = 1800.0
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment for the agent (model endpoint, API key...).",
    )
    stall_seconds: PositiveFloat = Field(
        default=600.0,
        description="A run that says nothing this long (once started; longer while a tool "
        "call with its own longer time limit runs) is stopped as stuck, and the user told "
        "its last step. timeout_seconds stays the ceiling.",
    )
    max_warm_sessions: int = Field(
        default=4,
        ge=0,
        description="Agent processes kept between turns (one per active conversation, later "
        "turns skip the CLI's start-up); the least recently used is ended first. What the "
        "agent left running in the background still ends after each turn. 0: none (every "
        "turn starts the CLI afresh).",
    )
    budget_usd: PositiveFloat | None = Field(
        default=None,
        description="Per conversation: ask (a card, as action approvals do) before the turn "
        "that would likely take its spend past this many dollars.",
    )
    approvals: ActionApprovalSettings | None = Field(
        default=None,
        description="Action approvals (docs/approvals.md): set (even to {}) to have "
        "the agent's tool calls checked; the default rules ask before `git push`.",
    )
