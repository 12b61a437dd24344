"""The action approvals policy: which tool calls ask, run or are refused (decision 0087)."""

from __future__ import annotations

import logging
import shlex
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from gateway_bot.config.action_rules import (
    ActionApprovalSettings,
    ActionRule,
    RepoActionApprovals,
    RuleAction,
)
from gateway_bot.config.repo import parse_repo_config
from gateway_bot.config.yaml_tags import ConfigError
from gateway_bot.core.actions.budget import budget_request, spent_and_last
from gateway_bot.core.actions.policy import (
    ToolCall,
    evaluate,
    merge_repo_policy,
    signature,
    simple_commands,
)

DEFAULT = ActionApprovalSettings()


def bash(command: str) -> ToolCall:
    return ToolCall("Bash", {"command": command})


@pytest.mark.parametrize(
    "command",
    [
        "git push origin main",
        "cd repo && git push origin main",
        "git status; git push",
        "FOO=1 git  push --force",
        "sudo -E git push > /dev/null 2>&1",
        "bash -c 'cd y; git push'",
        "(cd a && git push) | cat",
        "echo start\ngit push",
        "git commit -m done || git push",
    ],
)
def test_default_policy_asks_for_git_push_wherever_it_sits_in_the_line(command: str) -> None:
    verdict = evaluate(DEFAULT, bash(command))
    assert verdict.action is RuleAction.ASK
    assert verdict.rule == 'Bash "git push*": ask'


@pytest.mark.parametrize(
    "command",
    [
        "git status",
        "echo 'git push'",  # a word, not a command
        "git commit -m 'then git push'",
        "ls # git push",
    ],
)
def test_default_policy_runs_everything_else(command: str) -> None:
    assert evaluate(DEFAULT, bash(command)).action is RuleAction.ALLOW


def test_other_tools_run_by_default() -> None:
    assert evaluate(DEFAULT, ToolCall("Write", {"file_path": "/w/a.py"})).action is (
        RuleAction.ALLOW
    )


def test_strictest_rule_wins_and_regex_rules_search() -> None:
    policy = ActionApprovalSettings(
        rules=[
            ActionRule(tool="Bash", command="git *", action=RuleAction.ALLOW),
            ActionRule(tool="Bash", command="git push*", action=RuleAction.ASK),
            ActionRule(tool="Bash", command=r"re:\brm\s+-rf\b", action=RuleAction.DENY),
            ActionRule(tool="Write", path="*/.github/workflows/*", action=RuleAction.ASK),
            ActionRule(tool="mcp__github__*", action=RuleAction.DENY),
            ActionRule(tool="WebFetch", url="https://*.example.com/*", action=RuleAction.ASK),
        ],
        default=RuleAction.ASK,
    )
    assert evaluate(policy, bash("git status")).action is RuleAction.ALLOW
    assert evaluate(policy, bash("git push")).action is RuleAction.ASK
    denied = evaluate(policy, bash("git push && rm -rf /"))
    assert denied.action is RuleAction.DENY
    assert denied.rule.startswith("Bash")
    workflow = ToolCall("Write", {"file_path": "/work/repo/.github/workflows/ci.yml"})
    assert evaluate(policy, workflow).action is RuleAction.ASK
    assert evaluate(policy, ToolCall("mcp__github__create_pr")).action is RuleAction.DENY
    fetch = ToolCall("WebFetch", {"url": "https://api.example.com/x"})
    assert evaluate(policy, fetch).action is RuleAction.ASK
    # Unmatched: the default.
    unmatched = evaluate(policy, ToolCall("Read", {"file_path": "/x"}))
    assert (unmatched.action, unmatched.rule) == (RuleAction.ASK, "default: ask")


def test_always_in_this_conversation_allows_that_exact_call_but_never_a_deny() -> None:
    push = bash("git push origin main")
    always = {signature(push)}
    assert evaluate(DEFAULT, push, always).action is RuleAction.ALLOW
    assert evaluate(DEFAULT, bash("git push origin other"), always).action is RuleAction.ASK
    strict = ActionApprovalSettings(
        rules=[ActionRule(tool="Bash", command="git push*", action=RuleAction.DENY)]
    )
    assert evaluate(strict, push, always).action is RuleAction.DENY


def test_always_for_a_long_tool_input_does_not_cover_one_that_only_starts_the_same() -> None:
    """The attack: the agent calls an MCP tool whose first input value is long, someone
    presses Always for it, and the agent calls again with the same start and another target
    (the keys are sorted: ``body`` before ``head``). That is another action: it asks."""
    policy = ActionApprovalSettings(
        rules=[ActionRule(tool="mcp__github__*", action=RuleAction.ASK)]
    )
    body = "Fixes the flaky test. " * 200
    allowed = ToolCall("mcp__github__merge", {"body": body, "head": "feature"})
    always = {signature(allowed)}
    assert evaluate(policy, allowed, always).action is RuleAction.ALLOW
    other = ToolCall("mcp__github__merge", {"body": body, "head": "main"})
    assert evaluate(policy, other, always).action is RuleAction.ASK


def test_always_for_an_mcp_call_with_a_path_does_not_cover_that_path_elsewhere() -> None:
    """The attack: Always for an MCP tool writing README.md on a branch; the agent then writes
    README.md on main. An MCP tool's ``path`` is not all it acts on: that asks."""
    policy = ActionApprovalSettings(
        rules=[ActionRule(tool="mcp__github__*", action=RuleAction.ASK)]
    )
    readme = {"owner": "me", "repo": "site", "path": "README.md", "content": "hi"}
    allowed = ToolCall("mcp__github__create_or_update_file", {**readme, "branch": "feature"})
    always = {signature(allowed)}
    assert evaluate(policy, allowed, always).action is RuleAction.ALLOW
    other = ToolCall("mcp__github__create_or_update_file", {**readme, "branch": "main"})
    assert evaluate(policy, other, always).action is RuleAction.ASK


def test_repo_config_may_only_make_the_policy_stricter(caplog: pytest.LogCaptureFixture) -> None:
    repo = parse_repo_config(
        "approvals:\n"
        "  rules:\n"
        "    - {tool: Bash, command: 'git push*', action: allow}\n"
        "    - {tool: Bash, command: '*deploy*', action: ask}\n"
        "  default: allow\n"
    )
    server = ActionApprovalSettings(default=RuleAction.ASK)
    with caplog.at_level(logging.WARNING):
        merged = merge_repo_policy(server, repo.approvals)
    assert evaluate(merged, bash("git push origin main")).action is RuleAction.ASK
    assert evaluate(merged, bash("./deploy.sh prod")).action is RuleAction.ASK
    assert merged.default is RuleAction.ASK
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("git push*" in w and "stricter" in w for w in warnings), warnings
    assert any("default allow" in w for w in warnings), warnings


def test_repo_config_can_deny_and_ask_more() -> None:
    repo = RepoActionApprovals(
        rules=[ActionRule(tool="Bash", command="git push*", action=RuleAction.DENY)],
        default=RuleAction.ASK,
    )
    merged = merge_repo_policy(DEFAULT, repo)
    assert evaluate(merged, bash("cd x && git push")).action is RuleAction.DENY
    assert evaluate(merged, bash("ls")).action is RuleAction.ASK


def test_a_repo_regex_that_would_hang_the_daemon_is_a_config_error() -> None:
    """The attack: the repo's config denies ``re:^(a|aa)+$``, and the agent runs a command of
    forty ``a``s then ``b``: matching it in the event loop would backtrack for ever and stall
    every conversation. The repo's rules take globs only; the server's may be regexes."""
    with pytest.raises(ConfigError, match="globs only"):
        parse_repo_config(
            "approvals:\n  rules:\n    - {tool: Bash, command: 're:^(a|aa)+$', action: deny}\n"
        )
    with pytest.raises(ConfigError, match="globs only"):
        parse_repo_config("approvals:\n  rules:\n    - {tool: Write, path: 're:x', action: ask}\n")
    repo = parse_repo_config(
        "approvals:\n  rules:\n    - {tool: Bash, command: '*(a|aa)*', action: deny}\n"
    )
    merged = merge_repo_policy(DEFAULT, repo.approvals)
    assert evaluate(merged, bash("a" * 40 + "b")).action is RuleAction.ALLOW


def test_bad_rules_are_config_errors() -> None:
    with pytest.raises(ValidationError, match="regular expression"):
        ActionRule(command="re:(", action=RuleAction.ASK)
    with pytest.raises(ValidationError):
        ActionRule.model_validate({"command": "x", "action": "ask", "colour": "red"})
    with pytest.raises(ValidationError, match="default: deny"):
        ActionApprovalSettings(default=RuleAction.DENY)


_WORD = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12
).filter(lambda w: w.strip() == w and not set(w) <= set(";&|()<>\n"))
"""Words that are not all shell punctuation: a quoted ``';'`` lexes like a bare one (the
parser then sees one more command, which can only make a rule match more often)."""
_PREFIXES = st.lists(st.lists(_WORD, min_size=1, max_size=3), max_size=3)
_JOINERS = st.sampled_from([" && ", " || ", "; ", " | ", "\n", " & "])


@given(before=_PREFIXES, after=_PREFIXES, joiner=_JOINERS, args=st.lists(_WORD, max_size=3))
def test_a_git_push_anywhere_in_a_chain_of_quoted_commands_is_asked(
    before: list[list[str]], after: list[list[str]], joiner: str, args: list[str]
) -> None:
    """Whatever other (quoted) commands surround it, ``git push`` is found."""
    commands = [
        " ".join(shlex.quote(w) for w in words) for words in [*before, ["git", "push", *args]]
    ]
    commands += [" ".join(shlex.quote(w) for w in words) for words in after]
    line = joiner.join(commands)
    assert f"git push{''.join(' ' + a for a in args)}" in simple_commands(line)
    assert evaluate(DEFAULT, bash(line)).action is RuleAction.ASK


@given(words=st.lists(_WORD, min_size=1, max_size=6))
def test_quoted_words_are_never_commands(words: list[str]) -> None:
    """A single command's quoted arguments stay its arguments: ``echo 'a; git push'``
    is one command (echo), so what it prints is not what it runs."""
    line = "echo " + " ".join(shlex.quote(w) for w in words)
    assert simple_commands(line) == ["echo " + " ".join(words)]


def _task(cost: float, completed_at: float | None) -> Any:
    return SimpleNamespace(cost_usd=cost, completed_at=completed_at)


def test_the_budget_asks_before_the_turn_that_would_likely_cross_it() -> None:
    tasks = [_task(0.4, 1.0), _task(0.5, 3.0), _task(0.0, None)]
    spent, last = spent_and_last(tasks)
    assert (spent, last) == (pytest.approx(0.9), 0.5)
    assert budget_request("c1", "t1", 2.0, spent, last) is None
    question = budget_request("c1", "t1", 1.2, spent, last)
    assert question is not None
    assert (question.kind, question.rule, question.signature) == (
        "budget",
        "agent.budget_usd",
        "budget 1.20",
    )
    assert "spent $0.9000 of its $1.20 budget" in question.details
    assert budget_request("c1", "t1", 1.0, 0.0, 0.0) is None  # a first turn runs
