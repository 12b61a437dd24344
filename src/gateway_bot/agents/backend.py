"""What the daemon needs to know of an agent backend, in one frozen descriptor.

The composition root (``runtime/daemon.py``) picks a backend by ``agent.backend``
(``agents/registry.py``) and reads everything backend-specific from it: which environment
variables the agent inherits, what ``gateway-bot check`` says when credentials are missing,
which model API the egress allowlist must always open, which credentials the egress proxy
holds for the agent, what goes into the agent image, and how to make the runner. Nothing
outside ``agents/`` names a particular CLI, so a second backend is a second descriptor.

Everything the sandbox gets from here is plain data (rules, credentials, file paths): the
sandbox never imports agents.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gateway_bot.agents.base import AgentEvent, AgentRunner, WarmRunner, WarmSettings
from gateway_bot.sandbox.base import InjectedCredential
from gateway_bot.sandbox.egress.allowlist import rule_for_url
from gateway_bot.sandbox.egress.rules import EgressRule


@dataclass(frozen=True)
class AgentBackend:
    name: str
    """What ``agent.backend`` says in the server config."""
    default_command: tuple[str, ...]
    """``agent.command`` when the config leaves it out."""
    make_runner: Callable[[Sequence[str]], AgentRunner]
    """The runner for a command (as it runs: resolved on the host, as named in an image)."""
    parse_stream_line: Callable[[str], Sequence[AgentEvent]]
    """One line of the CLI's output (as ``events.jsonl`` keeps it) as typed events: what a
    task's timeline is read with."""
    env_names: tuple[str, ...]
    """Model-endpoint variables the agent inherits from the daemon's environment and .env
    (never the whole environment)."""
    base_url_env: str
    """The variable naming the model API's base URL: a loopback one is relayed into the
    sandbox, and the daemon writes the relayed URL back under this name."""
    default_api_url: str
    """The model API when ``base_url_env`` is unset."""
    credentials_problem: Callable[[Mapping[str, str]], str | None]
    """What ``check`` (and a refused start) says when the environment holds no usable
    credentials; None when it does."""
    injected_credentials: Callable[[Mapping[str, str]], tuple[InjectedCredential, ...]]
    """The credentials in the agent's environment that a filtering sandbox keeps with its
    egress proxy (the agent holds placeholders)."""
    locate_command: Callable[[Sequence[str]], list[str]]
    """The command with its program found on this host (PATH, or where set-up pins it);
    anything it does not recognise is returned as it is."""
    image_files: Callable[[Path], dict[str, Path]]
    """The agent image's build-context files (name -> host path) for the host's resolved
    program. The default Containerfile copies them onto the image's PATH."""
    install_hint: str
    """How to get the program when it is missing: the end of the sentence ``check`` prints."""
    limitations: tuple[str, ...] = ()
    """What this CLI cannot do that others here can (``check`` prints them in one line)."""
    asks_tool_calls: bool = False
    """Its runner routes the agent's tool calls to the daemon (``AgentRequest.permissions``)
    when action approvals are on; False: its tool calls run unasked."""
    make_warm_runner: Callable[[Sequence[str], WarmSettings], WarmRunner] | None = None
    """The runner that keeps one agent process per conversation between turns; None when
    the backend's CLI cannot take turn after turn on its stdin."""

    def model_api_url(self, env: Mapping[str, str]) -> str:
        return env.get(self.base_url_env) or self.default_api_url

    def model_api_rules(self, env: Mapping[str, str]) -> tuple[EgressRule, ...]:
        """The egress rules every task's allowlist starts with: the model API's host and
        port, nothing else. A repo's allowlist cannot forget them."""
        return (rule_for_url(self.model_api_url(env)),)
