"""``gateway-bot check --sandbox``: run the canary (``sandbox/canary.py``) in a throwaway
execution context of the configured sandbox and say, line by line, what it proved.

Listeners are opened only on the host's side of networks the sandbox itself made (the
egress network's gateway for IPv4, the canary network's bridge link-local for IPv6); the
canary's own context, container and network are removed afterwards. It never calls the
sandbox's ``open`` (which takes over a running daemon's containers), so it is safe to run
beside a live daemon.
"""

from __future__ import annotations

import asyncio
import errno
import secrets
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from gateway_bot.config.server import ServerConfig
from gateway_bot.runtime.agent_setup import agent_image_files
from gateway_bot.sandbox.base import ExecutionContext, SandboxUnavailable
from gateway_bot.sandbox.canary import CanaryReport, CountingListener, Target, probe
from gateway_bot.sandbox.factory import create_sandbox
from gateway_bot.sandbox.podman.sandbox import PodmanSandbox

OK, BAD = "ok  ", "FAIL"


def check_sandbox(config: ServerConfig, config_path: Path) -> int:
    """Print the canary's findings; 0 when the sandbox confines, 2 otherwise."""
    sandbox = create_sandbox(config.sandbox, config.state_dir, agent_image_files(config))
    if not isinstance(sandbox, PodmanSandbox):
        print(
            f"{BAD} NOT sandboxed: sandbox.kind is {config.sandbox.kind!r}; the agent runs on "
            "this host with your permissions and unfiltered network."
        )
        return 2
    context_id = f"canary-{secrets.token_hex(4)}"
    root = config.state_dir / "sandbox" / "canary" / context_id
    context = ExecutionContext(
        id=context_id,
        workspace=root / "workspace",
        home=root / "home",
        inbox=root / "inbox",
        outbox=root / "outbox",
        storage=root / "storage",
    )
    for path in (context.workspace, context.home, context.inbox, context.outbox, context.storage):
        path.mkdir(parents=True, exist_ok=True)
    marker = root / "host-only-marker"
    marker.write_text("the canary must not see this\n")
    host_paths = [str(marker), str(config_path.resolve()), str(config.state_dir.resolve())]
    try:
        return asyncio.run(_check(sandbox, context, host_paths))
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _check(sandbox: PodmanSandbox, context: ExecutionContext, host_paths: list[str]) -> int:
    listeners: list[CountingListener] = []
    try:
        await sandbox.check()
        first = await sandbox.start(context, ["true"], {})  # makes container and network
        await first.wait()
        targets = await _targets(sandbox, context.id, listeners)
        report = await probe(sandbox, context, host_paths, targets)
    except SandboxUnavailable as exc:
        print(f"{BAD} the sandbox cannot run anything: {exc}")
        return 2
    finally:
        for listener in listeners:
            listener.close()
        try:
            await sandbox.discard(context.id)
        except Exception as exc:  # the findings stand; say what is left behind
            print(f"warning: removing the canary's container failed ({exc}); remove "
                  f"gwb-{context.id} with podman rm -f")  # fmt: skip
        await sandbox.close()
    return _print_report(report, f"gwb-{context.id}", targets)


async def _targets(
    sandbox: PodmanSandbox, context_id: str, listeners: list[CountingListener]
) -> list[tuple[Target, CountingListener | None]]:
    egress = await sandbox.service.api(
        lambda client: dict(client.networks.get(sandbox.settings.egress_network).attrs)
    )
    own = await sandbox.service.api(
        lambda client: dict(client.networks.get(f"gwb-net-{context_id}").attrs)
    )
    targets: list[tuple[Target, CountingListener | None]] = []
    gateway = _gateway(egress)
    if gateway:
        v4 = CountingListener(socket.AF_INET, (gateway, 0))
        listeners.append(v4)
        label = "IPv4, the host's side of the egress network"
        targets.append((Target(label, gateway, v4.port), v4))
    bridge = str(own.get("network_interface") or "")
    link_local = link_local_address(bridge) if bridge else None
    if link_local:
        v6 = await _listening_once_usable(
            (link_local, 0, 0, socket.if_nametoindex(bridge)), TENTATIVE_WAIT_S
        )
        listeners.append(v6)
        label = "IPv6 link-local, the host's side of the conversation network"
        targets.append((Target(label, f"{link_local}%eth0", v6.port), v6))
    return targets


TENTATIVE_WAIT_S = 10.0
"""A bridge made moments ago holds its IPv6 link-local address as tentative (duplicate
address detection, a second or two): it cannot be bound until then."""


async def _listening_once_usable(
    address: tuple[str, int, int, int], wait_s: float
) -> CountingListener:
    """A listener on ``address`` once the kernel lets it be bound (never bound early with
    IP_FREEBIND: a tentative address drops what is sent to it, which would pass for the
    sandbox's confinement)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return CountingListener(socket.AF_INET6, address)
        except OSError as exc:
            if exc.errno != errno.EADDRNOTAVAIL or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.1)


def _gateway(attrs: dict[str, Any]) -> str | None:
    for subnet in attrs.get("subnets") or []:
        if subnet.get("gateway"):
            return str(subnet["gateway"])
    return None


def link_local_address(interface: str) -> str | None:
    """The interface's fe80:: address, from /proc/net/if_inet6 (scope 0x20 = link)."""
    try:
        lines = Path("/proc/net/if_inet6").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) == 6 and fields[5] == interface and fields[3] == "20":
            groups = [fields[0][i : i + 4] for i in range(0, 32, 4)]
            return str(socket.inet_ntop(socket.AF_INET6, bytes.fromhex("".join(groups))))
    return None


def _print_report(
    report: CanaryReport, hostname: str, targets: list[tuple[Target, CountingListener | None]]
) -> int:
    print(f"sandbox canary: a shell started the way the agent's processes are ({hostname})")
    checks = [
        (
            report.hostname == hostname,
            f"ran inside the conversation's container (hostname {report.hostname or '?'}, "
            f"root filesystem {report.root_mount or '?'})",
        ),
        (
            not report.visible_host_paths,
            "host paths invisible (state dir, config, a marker file)"
            if not report.visible_host_paths
            else f"host paths visible inside: {', '.join(report.visible_host_paths)}",
        ),
    ]
    root_is_host_root = report.uid_map.startswith("0:0:")
    checks.append(
        (
            bool(report.uid_map) and not root_is_host_root,
            f"container root is not host root (uid map {report.uid_map or '?'})"
            if not root_is_host_root
            else "container root IS host root (no user namespace: sandbox.userns_host_uid)",
        )
    )
    options = set(report.workspace_options.split(","))
    checks.append(
        (
            {"nosuid", "nodev"} <= options,
            f"the workspace is mounted nosuid,nodev ({report.workspace_options or '?'})",
        )
    )
    for target, _ in targets:
        address = f"{target.host}/{target.port}"
        reached = address in report.connected
        checks.append(
            (not reached, f"direct connection to {target.label}: {'REACHED' if reached else 'no'}")
        )
    checks.append((report.finished, "the canary ran to its end"))
    for passed, text in checks:
        print(f"{OK if passed else BAD} {text}")
    if report.confined(hostname) and all(passed for passed, _ in checks):
        print("the sandbox confines the agent")
        return 0
    print("the sandbox does NOT confine the agent; canary output:\n" + report.output)
    return 2
