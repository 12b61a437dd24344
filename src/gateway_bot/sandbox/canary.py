"""The canary: proof from inside that a sandbox really confines what runs in it.

A peer shipped a mode that said "sandboxed" while commands ran on the host. So the check
does not trust configuration: it starts a shell through ``Sandbox.start``, the very path
every agent process (and so every tool call) takes, and the shell reports what it sees:
its hostname, whether host paths exist, its mount namespace's root, and whether a direct
connection (ignoring the proxy variables) to listeners the caller runs on the host's side
gets anywhere. The caller's listeners count connections too, so a connection the shell
failed to notice still counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway_bot.sandbox.base import ExecutionContext, Sandbox

_SCRIPT = r"""
echo "hostname=$(cat /proc/sys/kernel/hostname)"
for p in {paths}; do [ -e "$p" ] && echo "visible=$p"; done
echo "uid_map=$(awk 'NR == 1 {{print $1 ":" $2 ":" $3}}' /proc/self/uid_map)"
echo "root_mount=$(awk '$5 == "/" {{print $4; exit}}' /proc/self/mountinfo)"
echo "workspace_options=$(awk -v w={workspace} '$5 == w {{print $6; exit}}' /proc/self/mountinfo)"
unset HTTPS_PROXY HTTP_PROXY https_proxy http_proxy ALL_PROXY all_proxy
for t in {targets}; do
  if timeout 5 bash -c "exec 3<>/dev/tcp/$t" 2>/dev/null; then echo "connected=$t";
  else echo "refused=$t"; fi
done
echo "done=1"
"""


@dataclass(frozen=True)
class Target:
    label: str
    """What the address is (e.g. "IPv4, host side of the egress network")."""
    host: str
    port: int


@dataclass
class CanaryReport:
    hostname: str = ""
    visible_host_paths: list[str] = field(default_factory=list)
    root_mount: str = ""
    uid_map: str = ""
    """The first line of /proc/self/uid_map: ``0:0:4294967295`` means root is host root."""
    workspace_options: str = ""
    """Mount options of the workspace as the process sees them (nosuid,nodev expected)."""
    connected: list[str] = field(default_factory=list)
    """Targets the shell reached, or that saw a connection."""
    refused: list[str] = field(default_factory=list)
    finished: bool = False
    output: str = ""

    def confined(self, expected_hostname: str | None) -> bool:
        return (
            self.finished
            and not self.visible_host_paths
            and not self.connected
            and (expected_hostname is None or self.hostname == expected_hostname)
        )


class CountingListener:
    """A TCP listener on a host-side address of a network the sandbox made."""

    def __init__(self, family: int, address: tuple[str, int] | tuple[str, int, int, int]) -> None:
        self.connections = 0
        self._server = socket.socket(family, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(address)
        self._server.listen(8)
        self.port = int(self._server.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            with contextlib.suppress(OSError):
                client.sendall(b"gateway-bot canary listener\n")
            client.close()

    def close(self) -> None:
        self._server.close()


async def probe(
    sandbox: Sandbox,
    context: ExecutionContext,
    host_paths: Sequence[str],
    targets: Sequence[tuple[Target, CountingListener | None]],
) -> CanaryReport:
    """Run the canary shell in ``context`` and read its report."""
    addresses = [f"{t.host}/{t.port}" for t, _ in targets]
    script = _SCRIPT.format(
        paths=" ".join(_quote(p) for p in host_paths) or "/nonexistent-canary-path",
        targets=" ".join(_quote(a) for a in addresses) or "",
        workspace=_quote(sandbox.paths(context).workspace),
    )
    process = await sandbox.start(context, ["bash", "-c", script], {})
    lines: list[str] = []
    async with asyncio.timeout(120):
        async for raw in process.stdout:
            lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
        await process.wait()
    stderr = await process.read_stderr()
    report = CanaryReport(output="\n".join(lines) + ("\n" + stderr if stderr.strip() else ""))
    for line in lines:
        key, _, value = line.partition("=")
        if key == "hostname":
            report.hostname = value
        elif key == "visible":
            report.visible_host_paths.append(value)
        elif key == "uid_map":
            report.uid_map = value
        elif key == "root_mount":
            report.root_mount = value
        elif key == "workspace_options":
            report.workspace_options = value
        elif key == "connected":
            report.connected.append(value)
        elif key == "refused":
            report.refused.append(value)
        elif key == "done":
            report.finished = True
    for (target, listener), address in zip(targets, addresses, strict=True):
        if listener is not None and listener.connections and address not in report.connected:
            report.connected.append(address)
        del target
    return report


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
