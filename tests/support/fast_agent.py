"""A fast stand-in for the agent CLI, for tests of the daemon rather than the model: a
small Python script speaking Claude Code's stream-json (an init line, then a ``result``
of ``Echo: <the message's own words>``), run cold on the host sandbox. The real CLI costs
about a second and 300 MB per run; this costs an interpreter start.

The words are the last line of the prompt that is not one of gateway-bot's ``[...]``
header lines (the message body ends the prompt).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

FAST_AGENT = """#!{python}
import json, sys
lines = [l.strip() for l in sys.stdin.read().splitlines()]
said = [l for l in lines if l and not (l.startswith("[") and l.endswith("]"))]
print(json.dumps({{"type": "system", "subtype": "init", "session_id": "fast", "model": "fake"}}))
print(json.dumps({{"type": "result", "subtype": "success", "is_error": False, "num_turns": 1,
                  "result": "Echo: " + (said[-1] if said else "nothing"),
                  "session_id": "fast"}}))
"""


def fast_agent_sections(directory: Path, **execution: Any) -> dict[str, Any]:
    """Config sections (for ``write_config``'s overrides) that run the fast agent."""
    agent = directory / "fast-agent"
    agent.write_text(FAST_AGENT.format(python=sys.executable))
    agent.chmod(0o755)
    return {
        "agent": {"command": [str(agent)], "max_warm_sessions": 0, "timeout_seconds": 120},
        "execution": {"max_concurrent_tasks": 3, "max_pending_per_conversation": 3, **execution},
    }
