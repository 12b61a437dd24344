"""The agents factory: ``agent.backend`` in the server config -> its descriptor.

The only module that lists every backend, as ``channels/factory.py`` is for channels and
``sandbox/factory.py`` for sandboxes. Claude Code is the default and, for now, the only one.
"""

from __future__ import annotations

from gateway_bot.agents.backend import AgentBackend
from gateway_bot.agents.claude_code import CLAUDE_CODE

BACKENDS: dict[str, AgentBackend] = {backend.name: backend for backend in (CLAUDE_CODE,)}
DEFAULT_BACKEND = CLAUDE_CODE.name
_OLDER_SPELLINGS = {"claude_code": CLAUDE_CODE.name}


def backend_named(name: str) -> AgentBackend:
    """The descriptor for ``name``; a name no backend has is a ValueError saying which
    names there are (the config's own validation normally catches it first)."""
    try:
        return BACKENDS[_OLDER_SPELLINGS.get(name, name)]
    except KeyError:
        known = ", ".join(sorted(BACKENDS))
        raise ValueError(f"no agent backend named {name!r} (known: {known})") from None
