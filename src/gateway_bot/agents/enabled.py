"""The agent CLIs a deployment offers, each with its runner and default model.

``agent.backend`` is the default; ``agent.enabled`` adds the ones a repo
(``.gateway/config.yaml`` ``agent:``) or a conversation (``/agent NAME``) may choose. The
executor asks this set, never the registry: a name from a repo or a user that is not here
is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway_bot.agents.backend import AgentBackend
from gateway_bot.agents.base import AgentRunner


@dataclass(frozen=True)
class EnabledAgent:
    backend: AgentBackend
    runner: AgentRunner
    model: str | None
    """The server's model for it (``agent.backends.NAME.model``; ``agent.model`` for the
    default backend); None: the CLI's own default."""


@dataclass(frozen=True)
class AgentSet:
    default: str
    agents: Mapping[str, EnabledAgent]

    def names(self) -> list[str]:
        return list(self.agents)

    def get(self, name: str | None) -> EnabledAgent | None:
        return self.agents.get(name) if name else None

    def env_for(self, name: str, env: Mapping[str, str]) -> dict[str, str]:
        """The agent environment for backend ``name``: the model variables of the other
        enabled backends left out, so one CLI never holds another vendor's key (which its
        sandbox would not know to keep with the egress proxy)."""
        own = set(self.agents[name].backend.env_names)
        others = {
            variable
            for other, agent in self.agents.items()
            if other != name
            for variable in agent.backend.env_names
        }
        return {k: v for k, v in env.items() if k in own or k not in others}
