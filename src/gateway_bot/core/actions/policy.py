"""Which rule of the approvals policy a tool call meets: pure functions over data.

A Bash command is parsed the way a shell splits it (``shlex`` with its punctuation), into
the simple commands of its ``&&`` / ``||`` / ``;`` / ``|`` / ``&`` / newline chain and its
subshells, so ``cd x && git push`` meets ``git push*``. Leading variable assignments and
the usual wrappers (``sudo``, ``env``, ``command``, ``exec``, ``nohup``, ``time``) are
dropped, and ``bash -c '...'`` / ``sh -c '...'`` is parsed inside. A glob or regex is also
tried against the whole command line. This is a guard against mistakes, not a boundary:
the agent can always write a script that runs git under another name (docs/approvals.md);
the egress proxy's rules are the boundary.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import re
import shlex
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway_bot.config.action_rules import (
    REGEX_PREFIX,
    ActionApprovalSettings,
    ActionRule,
    RepoActionApprovals,
    RuleAction,
)

log = logging.getLogger(__name__)

_SEPARATORS = frozenset({"&&", "||", ";", ";;", "|", "|&", "&", "(", ")", "\n"})
_SIGNATURE_CHARS = 2000
_REDIRECTS = re.compile(r"^\d*(>|>>|<|<<|<<<|>&|<&|&>|&>>|>\|)$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_WRAPPERS = frozenset({"sudo", "env", "command", "exec", "nohup", "time", "builtin", "doas"})
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ash", "/bin/sh", "/bin/bash", "/usr/bin/bash"})
_MAX_DEPTH = 4
"""``bash -c "bash -c '...'"`` is parsed this deep; deeper is matched as text."""


@dataclass(frozen=True)
class ToolCall:
    tool: str
    input: Mapping[str, Any] = field(default_factory=dict)

    @property
    def command(self) -> str | None:
        value = self.input.get("command")
        return value if isinstance(value, str) else None

    @property
    def path(self) -> str | None:
        for key in ("file_path", "notebook_path", "path"):
            value = self.input.get(key)
            if isinstance(value, str):
                return value
        return None

    @property
    def url(self) -> str | None:
        value = self.input.get("url")
        return value if isinstance(value, str) else None


@dataclass(frozen=True)
class PolicyVerdict:
    action: RuleAction
    rule: str
    """The rule that decided (``ActionRule.describe``), or ``default: allow``."""


def simple_commands(command: str, depth: int = 0) -> list[str]:
    """The simple commands of a command line, each as its words joined by one space, with
    assignments, redirections and wrappers dropped. An unparseable line is itself."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()<>\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError:
        return [" ".join(command.split())]
    found: list[str] = []
    words: list[str] = []
    skip_next = False
    for token in [*tokens, ";"]:
        if skip_next:
            skip_next = False
            continue
        if token in _SEPARATORS or set(token) <= set(";&|()\n"):
            if words:
                found.extend(_unwrap(words, depth))
            words = []
        elif _REDIRECTS.match(token):
            if words and len(words[-1]) == 1 and words[-1].isdigit():
                words.pop()  # the descriptor of ``2>&1`` (lexed apart from its operator)
            skip_next = True
        else:
            words.append(token)
    return found


def _unwrap(words: list[str], depth: int) -> list[str]:
    while words and _ASSIGNMENT.match(words[0]):
        words = words[1:]
    while words and words[0] in _WRAPPERS:
        words = words[1:]
        while words and (words[0].startswith("-") or _ASSIGNMENT.match(words[0])):
            words = words[1:]
    if not words:
        return []
    if words[0] in _SHELLS and depth < _MAX_DEPTH:
        for index, word in enumerate(words[1:-1], start=1):
            if word.startswith("-") and not word.startswith("--") and "c" in word:
                return [" ".join(words), *simple_commands(words[index + 1], depth + 1)]
    return [" ".join(words)]


def pattern_matches(pattern: str, text: str) -> bool:
    """``re:REGEX`` searches; anything else is a glob over the whole text (``*`` crosses
    spaces and slashes)."""
    if pattern.startswith(REGEX_PREFIX):
        return re.search(pattern[len(REGEX_PREFIX) :], text) is not None
    return fnmatch.fnmatchcase(text, pattern)


def rule_matches(rule: ActionRule, call: ToolCall) -> bool:
    if not fnmatch.fnmatchcase(call.tool, rule.tool):
        return False
    if rule.command is not None:
        command = call.command
        if command is None:
            return False
        candidates = [" ".join(command.split()), *simple_commands(command)]
        if not any(pattern_matches(rule.command, text) for text in candidates):
            return False
    if rule.path is not None:
        path = call.path
        if path is None or not pattern_matches(rule.path, path):
            return False
    if rule.url is not None:
        url = call.url
        if url is None or not pattern_matches(rule.url, url):
            return False
    return True


def evaluate(
    policy: ActionApprovalSettings, call: ToolCall, always: Collection[str] = ()
) -> PolicyVerdict:
    """The strictest matching rule's action (deny over ask over allow; a matching allow
    rule beats an ``ask`` default), else the default;
    an ``ask`` whose signature the conversation allowed always (``always``) is an allow.
    A ``deny`` stays a deny whatever the conversation allowed."""
    verdict: PolicyVerdict | None = None
    for rule in policy.rules:
        stricter = verdict is None or rule.action.severity > verdict.action.severity
        if stricter and rule_matches(rule, call):
            verdict = PolicyVerdict(rule.action, rule.describe())
    if verdict is None:
        verdict = PolicyVerdict(policy.default, f"default: {policy.default.value}")
    if verdict.action is RuleAction.ASK and signature(call) in always:
        return PolicyVerdict(RuleAction.ALLOW, "always in this conversation")
    return verdict


_TARGETS = {
    "Bash": "command",
    "Write": "path",
    "Edit": "path",
    "MultiEdit": "path",
    "NotebookEdit": "path",
    "Read": "path",
    "WebFetch": "url",
}
"""The Claude Code tools whose one target (the command, the file, the URL) is the action;
any other tool's whole input is (an MCP tool's ``path`` is one of several: repo, branch…)."""


def signature(call: ToolCall) -> str:
    """What "Always in this conversation" remembers: the tool and exactly what it acts on
    (the same command, the same file), never a pattern."""
    kind = _TARGETS.get(call.tool)
    target = getattr(call, kind) if kind is not None else None
    if target is None:
        shown = json.dumps(dict(call.input), sort_keys=True, default=str)
        if len(shown) > _SIGNATURE_CHARS:
            # Cut for /rules, but the digest of the whole input keeps it exact: an input
            # that only starts the same (a long first value) is another action.
            digest = hashlib.sha256(shown.encode()).hexdigest()
            shown = f"{shown[:_SIGNATURE_CHARS]}… sha256:{digest}"
        target = shown
    return f"tool {call.tool} {target}"


def merge_repo_policy(
    server: ActionApprovalSettings, repo: RepoActionApprovals | None
) -> ActionApprovalSettings:
    """The server's policy made stricter by the repo's: its ask and deny rules are added;
    an allow rule or a looser default could only loosen, so it is ignored with a warning."""
    if repo is None:
        return server
    rules = list(server.rules)
    for rule in repo.rules:
        if rule.action is RuleAction.ALLOW:
            log.warning(
                "ignored the repo's approvals rule %s: the repo config may only make the "
                "policy stricter",
                rule.describe(),
            )
            continue
        rules.append(rule)
    default = server.default
    if repo.default is not None:
        if repo.default.severity >= server.default.severity:
            default = repo.default
        else:
            log.warning(
                "ignored the repo's approvals default %s: looser than the server's %s",
                repo.default.value,
                server.default.value,
            )
    if default is RuleAction.DENY:
        default = RuleAction.ASK
    return server.model_copy(update={"rules": rules, "default": default})
