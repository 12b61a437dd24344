"""``gateway-bot check``: validate a config and the set-up it needs, without starting anything.

It prints what a deployment would run with (state, repo, channels, the agent CLI and its
backends), warns of what would stop the agent (credentials), checks that the sandbox can
run, and says how the agent will reach its model API; ``--sandbox`` then runs the canary
(``cli/check_sandbox.py``). Exit 2 when the config or the set-up is wrong, else 0.

Apart from cli/ (the parser and the other commands) because it is the one command that
looks at every part of a deployment; it is imported only when ``check`` runs.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from gateway_bot.channels.matrix.commands import describe_e2ee
from gateway_bot.cli.config_source import (
    BUILT_IN,
    built_in_config,
    built_in_dotenv_dir,
    load_config,
    sample_repo_path,
)
from gateway_bot.cli.exit_codes import EXIT_CONFIG
from gateway_bot.cli.preflight import (
    local_repo_problem,
    other_repos_state_problem,
    state_dir_problem,
)
from gateway_bot.config.dashboard import token_weakness
from gateway_bot.runtime.agent_setup import (
    agent_backend,
    agent_command,
    agent_environment,
    agent_program,
    check_agent_setup,
    describe_backends,
    model_api_on_loopback,
)
from gateway_bot.sandbox.base import Sandbox, SandboxUnavailable
from gateway_bot.sandbox.factory import create_sandbox

if TYPE_CHECKING:
    from gateway_bot.agents.backend import AgentBackend


def run_check(config_path: Path | None, *, canary: bool = False) -> int:
    """Check the config at ``config_path``, or the built-in one ``chat`` runs without
    ``--config`` (and with ``canary`` the sandbox from inside); the exit code."""
    config = load_config(config_path) if config_path else built_in_config(make_sample=False)
    if config is None:
        return EXIT_CONFIG
    path = config_path or Path(BUILT_IN)
    if (unusable := state_dir_problem(config.state_dir, create=False)) is not None:
        print(f"{path}: {unusable}", file=sys.stderr)
        return EXIT_CONFIG
    channels = [name for name, value in config.channels if value is not None]
    agent_env = agent_environment(
        config, config_path.parent if config_path else built_in_dotenv_dir()
    )
    problem = check_agent_setup(config, agent_env)
    print(
        f"{path}: OK (state {config.state_dir}, repo {config.repo.url}, "
        f"channels: {', '.join(channels) or 'none'})"
    )
    print(f"agent: {agent_program(config) or agent_command(config)[0] + ' (not found)'}")
    for line in describe_backends(config):
        print(line)
    if problem is not None:
        print(f"warning: {problem.message} Until then `run` and `chat` refuse to start.")
    dashboard = config.dashboard
    if dashboard and dashboard.enabled and (weak := token_weakness(dashboard.token)):
        print(f"warning: {weak}")
    if config.repo.url == str(sample_repo_path(config.state_dir)) and config_path is None:
        print("note: not in a git repo: `gateway-bot chat` here works on a sample repo it makes")
    elif (missing_repo := local_repo_problem(config.repo.url)) is not None:
        print(f"note: {missing_repo}")
    how = "state_dir in the config" if config_path else "GATEWAY_BOT_STATE_DIR=DIR gateway-bot chat"
    if taken_by := other_repos_state_problem(config.state_dir, config.repo.url, how=how):
        print(f"note: {taken_by}")
    if not channels:
        print(
            "note: no channel is enabled: `run` would refuse to start (add one under "
            "channels:, e.g. console: {})."
        )
    sandbox = create_sandbox(config.sandbox, config.state_dir)
    try:
        asyncio.run(sandbox.check())
        route = asyncio.run(
            _model_route(sandbox, config.sandbox.kind, agent_backend(config), agent_env)
        )
    except SandboxUnavailable as exc:
        print(f"error: the sandbox ({config.sandbox.kind}) cannot run: {exc}")
        return EXIT_CONFIG
    print(f"sandbox: {config.sandbox.kind} works")
    print(route)
    for line in describe_e2ee(config):
        print(line)
    if canary:
        from gateway_bot.cli.check_sandbox import check_sandbox

        return check_sandbox(config, config_path or config.state_dir)
    return 0


async def _model_route(
    sandbox: Sandbox, kind: str, backend: AgentBackend, agent_env: dict[str, str]
) -> str:
    """How the agent will reach its model API: one line for ``check``."""
    url = backend.model_api_url(agent_env)
    if kind == "none":
        return f"model API {url} reached directly by the agent on this host (no sandbox)"
    local = model_api_on_loopback(backend, agent_env)
    if local is None or urlsplit(local).scheme != "http":
        return f"model API {url} reached by the sandbox via the egress proxy"
    relay = urlsplit(await sandbox.reach_host_loopback(local, start=False)).netloc
    return (
        f"model API {url} reached by the sandbox through a relay at {relay}, via the egress proxy"
    )
