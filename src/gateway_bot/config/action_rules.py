"""Action approvals policy: which of the agent's tool calls run, wait for a person, or are
refused (``agent.approvals`` in the server config, ``approvals`` in the repo's
``.gateway/config.yaml``).

A rule names a tool (a glob over the tool's name: ``Bash``, ``Write``, ``Edit``,
``WebFetch``, ``mcp__github__*``) and optionally what it acts on: for Bash the command (a
glob such as ``git push*`` or ``re:`` and a regular expression, over each simple command of
the parsed command line), for file tools the path, for WebFetch the URL. Matching is
``core/actions/policy.py``'s; this module only says what may be written.

The strictest matching rule decides (deny over ask over allow, as in Claude Code's own
settings); a call no rule matches gets ``default``. The repo may only make it stricter: its
``allow`` rules and a looser ``default`` are ignored with a warning (``merge_repo_policy``).
"""

from __future__ import annotations

import enum
import re

from pydantic import Field, PositiveFloat, field_validator, model_validator

from gateway_bot.config.section import Section

REGEX_PREFIX = "re:"


class RuleAction(enum.Enum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"

    @property
    def severity(self) -> int:
        return {"allow": 0, "ask": 1, "deny": 2}[self.value]


class Deciders(enum.Enum):
    CONVERSATION = "conversation"
    """The person whose message the task answers, members an owner admitted to the room,
    and owners and admins."""
    OWNERS = "owners"
    """Owners and admins (``access.owners`` / ``access.admins``) only."""


def _check_pattern(value: str | None) -> str | None:
    if value is None:
        return None
    if not value.strip():
        raise ValueError("a pattern may not be empty (leave the key out to match anything)")
    if value.startswith(REGEX_PREFIX):
        try:
            re.compile(value[len(REGEX_PREFIX) :])
        except re.error as exc:
            raise ValueError(f"{value!r} is not a regular expression: {exc}") from exc
    return value


class ActionRule(Section):
    tool: str = Field(
        default="Bash",
        min_length=1,
        description="Glob over the tool's name: Bash, Write, Edit, WebFetch, mcp__server__*.",
    )
    command: str | None = Field(
        default=None,
        description="Bash only: glob (`git push*`) or `re:REGEX` over each simple command.",
    )
    path: str | None = Field(
        default=None, description="File tools: glob or `re:REGEX` over the file's path."
    )
    url: str | None = Field(default=None, description="WebFetch: glob or `re:REGEX` over the URL.")
    action: RuleAction

    @field_validator("command", "path", "url")
    @classmethod
    def _patterns_compile(cls, value: str | None) -> str | None:
        return _check_pattern(value)

    def describe(self) -> str:
        """How a card names the rule that asked: ``Bash "git push*": ask``."""
        what = self.command or self.path or self.url
        target = f' "{what}"' if what else ""
        return f"{self.tool}{target}: {self.action.value}"


DEFAULT_RULES = (ActionRule(tool="Bash", command="git push*", action=RuleAction.ASK),)


class ActionApprovalSettings(Section):
    """``agent.approvals``."""

    rules: list[ActionRule] = Field(
        default_factory=lambda: list(DEFAULT_RULES),
        description="Default: every tool call runs except `git push`, which asks.",
    )
    default: RuleAction = Field(default=RuleAction.ALLOW, description="For a call no rule matches.")
    timeout_s: PositiveFloat = Field(
        default=600.0, description="No answer within this: the action is denied."
    )
    deciders: Deciders = Deciders.CONVERSATION

    @model_validator(mode="after")
    def _default_not_deny(self) -> ActionApprovalSettings:
        if self.default is RuleAction.DENY:
            raise ValueError("default: deny would refuse every tool call; use ask")
        return self


class RepoActionApprovals(Section):
    """``approvals`` in the repo's ``.gateway/config.yaml``: only stricter than the server's."""

    rules: list[ActionRule] = Field(default_factory=list)
    default: RuleAction | None = None

    @field_validator("rules")
    @classmethod
    def _globs_only(cls, rules: list[ActionRule]) -> list[ActionRule]:
        """A regular expression is matched in the daemon's event loop against what the agent
        writes: one from the repo (``re:^(a|aa)+$``) with a command the agent chose would
        backtrack for ever and stall every conversation. Globs cannot (``fnmatch`` compiles
        to patterns without catastrophic backtracking), so the repo gets globs only."""
        for rule in rules:
            for pattern in (rule.command, rule.path, rule.url):
                if pattern is not None and pattern.startswith(REGEX_PREFIX):
                    raise ValueError(
                        f"{pattern[:80]!r}: the repo's approvals rules take globs only "
                        "(`re:` regular expressions are for the server's config)"
                    )
        return rules
