"""The agents factory: ``agent.backend`` in the server config -> its descriptor.

The only module that lists every backend, as ``channels/factory.py`` is for channels and
``sandbox/factory.py`` for sandboxes. Claude Code is the default; Gemini CLI and Codex
beside it.
"""

from __future__ import annotations

from gateway_bot.agents.backend import AgentBackend
from gateway_bot.agents.base import AgentEvent
from gateway_bot.agents.claude.backend import CLAUDE_CODE
from gateway_bot.agents.codex.runner import CODEX
from gateway_bot.agents.gemini.runner import GEMINI_CLI

BACKENDS: dict[str, AgentBackend] = {
    backend.name: backend for backend in (CLAUDE_CODE, GEMINI_CLI, CODEX)
}
_OLDER_SPELLINGS = {"claude_code": CLAUDE_CODE.name}
_PARSE_ORDER = (CODEX, GEMINI_CLI, CLAUDE_CODE)
"""Codex's line types are dotted and Gemini CLI's lines carry a timestamp, so their
parsers claim only their own lines; Claude Code's would read a Gemini ``result`` line as
its own, so it goes last."""


def canonical_name(name: str) -> str:
    return _OLDER_SPELLINGS.get(name, name)


def backend_named(name: str) -> AgentBackend:
    """The descriptor for ``name``; a name no backend has is a ValueError saying which
    names there are (the config's own validation normally catches it first)."""
    try:
        return BACKENDS[canonical_name(name)]
    except KeyError:
        known = ", ".join(sorted(BACKENDS))
        raise ValueError(f"no agent backend named {name!r} (known: {known})") from None


def parse_any_line(line: str) -> list[AgentEvent]:
    """One line of a conversation's ``events.jsonl``, whichever backend wrote it (a
    conversation may change agent with /agent and /new)."""
    for backend in _PARSE_ORDER:
        if events := backend.parse_stream_line(line):
            return list(events)
    return []
