"""``gateway-bot down``: what ``run`` leaves running when it stops (a deployment's agent
containers and its egress proxy, by design: the next start takes them over) stopped, or
with ``--remove`` removed with the conversations' networks, on every configured host.

Refused while a daemon serves the state directory (its tasks run in those containers; it
would start them again at the next task anyway): stop the daemon first. The deployment is
the one the config names (``sandbox.deployment``, else derived from ``state_dir``), so
another deployment on the same podman is never touched. Workspaces, sessions and the state
stay: the next ``run`` or ``chat`` makes the containers again on the same directories
(docs/decisions/0123-down-command.md).
"""

from __future__ import annotations

import asyncio
import sys

from gateway_bot.cli.exit_codes import EXIT_CONFIG, EXIT_OK, EXIT_REFUSED
from gateway_bot.cli.preflight import DaemonLock
from gateway_bot.config.server import ServerConfig
from gateway_bot.sandbox.base import HostUnreachable, SandboxUnavailable
from gateway_bot.sandbox.podman.sandbox import PodmanSandbox
from gateway_bot.sandbox.podman.teardown import TakenDown, take_down


def run_down(config: ServerConfig, *, remove: bool) -> int:
    if config.sandbox.kind == "none":
        print("sandbox: none: the agent runs on this host; there are no containers to stop.")
        return EXIT_OK
    lock = DaemonLock(config.state_dir)
    if config.state_dir.is_dir() and not config.ha.enabled and lock.acquire() is not None:
        print(
            f"down: a gateway-bot daemon serves {config.state_dir}: its tasks run in these "
            "containers, and it would start them again. Stop it first (SIGTERM, or "
            "`systemctl --user stop gateway-bot`), then run `gateway-bot down` again.",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    try:
        sandbox = PodmanSandbox(config.sandbox, config.state_dir, {})
        return asyncio.run(_down(sandbox, remove=remove))
    finally:
        lock.release()


async def _down(sandbox: PodmanSandbox, *, remove: bool) -> int:
    several = len(sandbox.hosts) > 1
    code, acted = EXIT_OK, 0
    for host in sandbox.hosts:
        where = f" on {host.name}" if several else ""
        try:
            done = await take_down(host, sandbox.deployment, remove=remove)
        except HostUnreachable as exc:
            print(f"down: {exc}: nothing stopped there", file=sys.stderr)
            code = EXIT_REFUSED
            continue
        except SandboxUnavailable as exc:
            print(f"down: podman cannot be used{where}: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        for step in done:
            print(_line(step) + where)
        acted += sum(step.done != "already stopped" for step in done)
    what = "removed" if remove else "stopped"
    if acted == 0 and code == EXIT_OK:
        print(f"Nothing of deployment {sandbox.deployment} was left to be {what}.")
    else:
        print(f"Deployment {sandbox.deployment}: {acted} {what}.")
    return code


def _line(step: TakenDown) -> str:
    return f"{step.done:<15} {step.kind:<15} {step.name}"
